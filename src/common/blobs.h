// Where a cluster's shared files live (docs/cluster.md, "The store"): a
// directory every member mounts, or an S3 bucket. The shard logs and the
// member files are written through this and nothing else.
//
// A path is relative to the store's root, its parts joined by '/'. The one
// promise the shard log is built on is WriteNew: it puts an object in place
// only if nothing is there, atomically against every other writer (link(2)
// on a directory, a conditional PUT, `If-None-Match: *`, on S3).
//
// Thread-safety: each implementation may be called from several threads at
// once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kayak/status.h"

namespace kayak {

class Blobs {
 public:
  virtual ~Blobs() = default;
  // Where `path` is, for messages ("/mnt/store/x", "s3://bucket/prefix/x").
  virtual std::string Where(const std::string& path) const = 0;
  // The names of the objects directly under `dir` (one part each), in no
  // order; none when there is nothing there.
  virtual Status List(const std::string& dir, std::vector<std::string>* names) const = 0;
  // The whole object; kNotFound when there is none.
  virtual Result<std::string> Read(const std::string& path) const = 0;
  // Its size in bytes, or -1 when there is none.
  virtual Result<int64_t> Size(const std::string& path) const = 0;
  // Writes `head` then `body` as the object at `path`, replacing what is
  // there; a reader sees the old object or the new one whole. `durable`:
  // on stable storage before it returns (a directory's fsync; an S3 PUT
  // always is).
  virtual Status Write(const std::string& path, std::string_view head, std::string_view body,
                       bool durable) = 0;
  // Writes `bytes` (durably) at `path` only if nothing is there: false,
  // and nothing written, when something is.
  virtual Result<bool> WriteNew(const std::string& path, std::string_view bytes) = 0;
  // Removes the object; one that is not there is not an error.
  virtual Status Remove(const std::string& path) = 0;
  // Removes under `dir` what writers that died left half done (a
  // directory's temporary files older than a minute). Best effort.
  virtual void Tidy(const std::string& dir) { (void)dir; }
};

// A directory (a local disk, or NFS mounted by every member). The S3 kind
// is the s3 connector's (connectors/s3/blobs.h).
std::shared_ptr<Blobs> DirectoryBlobs(std::string root);

}  // namespace kayak
