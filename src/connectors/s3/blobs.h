// A cluster's store in an S3 bucket (Blobs; docs/cluster.md, "The
// store"): the shard logs and the member files as objects under a prefix.
// An entry of a shard's log is placed with a conditional PUT
// (`If-None-Match: *`), which S3 decides against every other writer.
#pragma once

#include <memory>
#include <string>

#include "common/blobs.h"
#include "connectors/s3/client.h"

namespace kayak::s3 {

// "s3://bucket" or "s3://bucket/prefix" (no '/' at its end).
Status ParseStoreUrl(const std::string& url, std::string* bucket, std::string* prefix);

// The objects under `prefix` in `e.bucket`.
std::shared_ptr<Blobs> MakeBlobs(Endpoint e, std::string prefix);

}  // namespace kayak::s3
