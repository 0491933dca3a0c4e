// The s3 output's client side (libcurl): the multipart upload calls it needs,
// signed with SigV4 (sigv4.h), over http or https, path-style or
// virtual-hosted. Errors are sorted as the output needs them: a connection
// failure, a 5xx or SlowDown is retryable; any other 4xx is permanent, with
// S3's own code and message.
#pragma once

#include <curl/curl.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "connectors/s3/sigv4.h"
#include "connectors/shared/tls.h"
#include "kayak/status.h"

namespace kayak::s3 {

struct Endpoint {
  std::string endpoint;  // http(s)://host[:port]; "" = AWS for `region`
  std::string region = "us-east-1";
  std::string bucket;
  bool path_style = false;
  Credentials credentials;
  TlsOptions tls;  // for an https endpoint: a CA, a client certificate, no verification
};

class Client {
 public:
  explicit Client(Endpoint e);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Status CreateUpload(const std::string& key, std::string* upload_id);
  Status UploadPart(const std::string& key, const std::string& upload_id, int part,
                    std::string_view bytes, std::string* etag);
  // `parts`: number and ETag, in order.
  Status Complete(const std::string& key, const std::string& upload_id,
                  const std::vector<std::pair<int, std::string>>& parts);
  // Whether the object exists (HEAD), and its size when it does.
  Status Exists(const std::string& key, bool* exists, uint64_t* size = nullptr);
  // The whole object; kNotFound when there is none.
  Status Get(const std::string& key, std::string* body);
  // The object's body handed to `sink` in chunks as it arrives, not kept; a
  // sink's error stops the transfer and is returned.
  Status GetEach(const std::string& key, const std::function<Status(std::string_view)>& sink);
  // `len` bytes of the object from byte `from` (a Range GET; fewer at its end).
  Status GetRange(const std::string& key, uint64_t from, uint64_t len, std::string* body);
  // Every key under `prefix`, handed to `each` (ListObjectsV2, page by page).
  Status ListKeys(const std::string& prefix, const std::function<void(std::string_view)>& each);
  Status Put(const std::string& key, std::string_view bytes);
  // PUT with `If-None-Match: *`: `*placed` false, and nothing written, when
  // the key exists. S3 decides it against every other writer at once; a
  // conditional PUT that raced another one on the key (409) is retryable.
  Status PutIfAbsent(const std::string& key, std::string_view bytes, bool* placed);
  // DeleteObject; a key that is not there is not an error.
  Status Delete(const std::string& key);
  // The ids of the multipart uploads open for exactly `key`
  // (ListMultipartUploads with `key` as the prefix).
  Status ListUploads(const std::string& key, std::vector<std::string>* upload_ids);
  // AbortMultipartUpload; an upload that is gone already is not an error.
  Status Abort(const std::string& key, const std::string& upload_id);

  // The URL of `key` (for messages and tests).
  std::string Url(const std::string& key, const Pairs& query) const;

 private:
  struct Response {
    long status = 0;
    std::string body;
    std::string etag;
    int64_t length = -1;  // Content-Length, when the answer had one
    // When set, a 2xx answer's body goes here instead of into `body`.
    const std::function<Status(std::string_view)>* sink = nullptr;
    std::string range;  // "from-to": a Range GET
    const char* header = nullptr;  // one more request header ("Name: value")
    Status sink_status;
    CURL* curl = nullptr;
  };
  static size_t OnBody(char* p, size_t size, size_t n, void* userdata);
  Status Send(const char* method, const std::string& key, const Pairs& query,
              std::string_view body, Response* out);

  const Endpoint e_;
  std::string scheme_, host_;  // from the endpoint
  CURL* curl_ = nullptr;
  char curl_error_[CURL_ERROR_SIZE] = {};  // libcurl's detail of a failed transfer
};

// The text of <tag>...</tag> in an S3 XML answer ("" when absent).
std::string XmlText(std::string_view xml, std::string_view tag);

}  // namespace kayak::s3
