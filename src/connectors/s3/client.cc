#include "connectors/s3/client.h"

#include <ctime>
#include <mutex>

#include "connectors/shared/tls_client.h"

namespace kayak::s3 {

std::string XmlText(std::string_view xml, std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  const size_t a = xml.find(open);
  if (a == std::string_view::npos) return "";
  const size_t b = xml.find(close, a + open.size());
  if (b == std::string_view::npos) return "";
  return std::string(xml.substr(a + open.size(), b - a - open.size()));
}

Client::Client(Endpoint e) : e_(std::move(e)) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::string ep = e_.endpoint.empty() ? "https://s3." + e_.region + ".amazonaws.com" : e_.endpoint;
  while (!ep.empty() && ep.back() == '/') ep.pop_back();
  const size_t colon = ep.find("://");
  scheme_ = colon == std::string::npos ? "https" : ep.substr(0, colon);
  host_ = colon == std::string::npos ? ep : ep.substr(colon + 3);
  if (!e_.path_style) host_ = e_.bucket + "." + host_;
  curl_ = curl_easy_init();
}

Client::~Client() {
  if (curl_ != nullptr) curl_easy_cleanup(curl_);
}

namespace {

std::string Path(const Endpoint& e, const std::string& key) {
  return e.path_style ? "/" + e.bucket + "/" + key : "/" + key;
}

std::string Query(const Pairs& query) {
  std::string out;
  for (const auto& [k, v] : query) {
    out += out.empty() ? "?" : "&";
    out += UriEncode(k, false);
    if (!v.empty() || k != "uploads") out += "=" + UriEncode(v, false);
  }
  return out;
}

}  // namespace

size_t Client::OnBody(char* p, size_t size, size_t n, void* userdata) {
  auto* r = static_cast<Response*>(userdata);
  if (r->sink != nullptr) {
    long status = 0;
    curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 200 && status < 300) {
      r->sink_status = (*r->sink)(std::string_view(p, size * n));
      return r->sink_status.ok() ? size * n : 0;  // 0 stops the transfer
    }
  }
  if (r->body.empty()) {
    // One allocation for the whole body where the answer says its length.
    curl_off_t length = -1;
    if (curl_easy_getinfo(r->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK &&
        length > 0 && length <= (curl_off_t{1} << 30)) {
      r->body.reserve(static_cast<size_t>(length));
    }
  }
  r->body.append(p, size * n);
  return size * n;
}

namespace {

size_t OnHeader(char* p, size_t size, size_t n, void* out) {
  std::string_view line(p, size * n);
  if (line.size() > 5 && (line.substr(0, 5) == "ETag:" || line.substr(0, 5) == "etag:")) {
    line.remove_prefix(5);
    while (!line.empty() && (line.front() == ' ')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n' || line.back() == ' ')) {
      line.remove_suffix(1);
    }
    static_cast<std::string*>(out)->assign(line);
  }
  return size * n;
}

}  // namespace

std::string Client::Url(const std::string& key, const Pairs& query) const {
  return scheme_ + "://" + host_ + UriEncode(Path(e_, key), true) + Query(query);
}

Status Client::Send(const char* method, const std::string& key, const Pairs& query,
                    std::string_view body, Response* out) {
  if (curl_ == nullptr) return Status::Internal("s3: cannot make a curl handle");
  Request r;
  r.method = method;
  r.path = Path(e_, key);
  r.query = query;
  r.headers = {{"host", host_}};
  r.payload_sha256 = Sha256Hex(body);
  const Signed s = SignV4(r, e_.credentials, {e_.region, "s3"}, AmzDate(std::time(nullptr)));
  curl_slist* headers = curl_slist_append(nullptr, "Expect:");
  headers = curl_slist_append(headers, "Content-Type:");
  if (out->header != nullptr) headers = curl_slist_append(headers, out->header);
  for (const auto& [k, v] : s.add_headers) headers = curl_slist_append(headers, (k + ": " + v).c_str());

  CURL* c = curl_;
  curl_easy_reset(c);
  const std::string url = Url(key, query);
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 300000L);
  if (!out->range.empty()) curl_easy_setopt(c, CURLOPT_RANGE, out->range.c_str());
  curl_error_[0] = '\0';
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_error_);
  const TlsOptions& tls = e_.tls;
  if (!tls.ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, tls.ca_file.c_str());
  if (!tls.cert_file.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT, tls.cert_file.c_str());
    curl_easy_setopt(c, CURLOPT_SSLKEY, tls.key_file.c_str());
  }
  if (tls.insecure_skip_verify) {
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (std::string_view(method) == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (std::string_view(method) != "GET") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  out->body.clear();
  out->etag.clear();
  out->curl = c;
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Client::OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &out->etag);
  const CURLcode rc = curl_easy_perform(c);
  curl_slist_free_all(headers);
  const std::string what = std::string("s3: ") + method + " " + e_.bucket + "/" + key;
  if (!out->sink_status.ok()) return out->sink_status;
  if (rc != CURLE_OK) {
    // libcurl's detail says which certificate check failed, where its
    // code's text says only that one did.
    std::string why = curl_error_[0] != '\0' ? curl_error_ : curl_easy_strerror(rc);
    // Under TLS 1.3 a server that wants a client certificate refuses it
    // after the client's handshake: the next read or write fails.
    if (scheme_ == "https" &&
        (rc == CURLE_SEND_ERROR || rc == CURLE_RECV_ERROR || rc == CURLE_SSL_CONNECT_ERROR)) {
      why += ClientCertificateHint(e_.tls);
    }
    return Status::Unavailable(what + ": " + why);
  }
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
  curl_off_t length = -1;
  if (curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK) {
    out->length = static_cast<int64_t>(length);
  }
  if (out->status >= 200 && out->status < 300) return Status::Ok();
  const std::string code = XmlText(out->body, "Code"), message = XmlText(out->body, "Message");
  const std::string why = what + ": HTTP " + std::to_string(out->status) +
                          (code.empty() ? "" : " " + code) +
                          (message.empty() ? "" : ": " + message);
  if (out->status >= 500 || out->status == 429 || code == "SlowDown" ||
      code == "RequestTimeout" || code == "ConditionalRequestConflict") {
    return Status::Unavailable(why);
  }
  if (out->status == 404 && (std::string_view(method) == "HEAD" || code == "NoSuchKey")) {
    return Status::NotFound(why);
  }
  return Status::Invalid(why);
}

Status Client::CreateUpload(const std::string& key, std::string* upload_id) {
  Response r;
  KAYAK_RETURN_IF_ERROR(Send("POST", key, {{"uploads", ""}}, "", &r));
  *upload_id = XmlText(r.body, "UploadId");
  if (upload_id->empty()) return Status::Unavailable("s3: no UploadId in the answer: " + r.body);
  return Status::Ok();
}

Status Client::UploadPart(const std::string& key, const std::string& upload_id, int part,
                          std::string_view bytes, std::string* etag) {
  Response r;
  KAYAK_RETURN_IF_ERROR(Send("PUT", key,
                             {{"partNumber", std::to_string(part)}, {"uploadId", upload_id}},
                             bytes, &r));
  if (r.etag.empty()) return Status::Unavailable("s3: no ETag for part " + std::to_string(part));
  *etag = r.etag;
  return Status::Ok();
}

Status Client::Complete(const std::string& key, const std::string& upload_id,
                        const std::vector<std::pair<int, std::string>>& parts) {
  std::string xml = "<CompleteMultipartUpload>";
  for (const auto& [n, etag] : parts) {
    xml += "<Part><PartNumber>" + std::to_string(n) + "</PartNumber><ETag>" + etag +
           "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  Response r;
  KAYAK_RETURN_IF_ERROR(Send("POST", key, {{"uploadId", upload_id}}, xml, &r));
  // S3 can answer 200 and put an error in the body.
  if (r.body.find("<Error>") != std::string::npos) {
    return Status::Unavailable("s3: completing " + key + ": " + XmlText(r.body, "Code") + ": " +
                               XmlText(r.body, "Message"));
  }
  return Status::Ok();
}

Status Client::ListUploads(const std::string& key, std::vector<std::string>* upload_ids) {
  upload_ids->clear();
  Pairs query = {{"prefix", key}, {"uploads", ""}};
  for (int page = 0; page < 100; ++page) {
    Response r;
    KAYAK_RETURN_IF_ERROR(Send("GET", "", query, "", &r));
    std::string_view rest = r.body;
    for (size_t at; (at = rest.find("<Upload>")) != std::string_view::npos;) {
      const size_t end = rest.find("</Upload>", at);
      if (end == std::string_view::npos) break;
      const std::string_view one = rest.substr(at, end - at);
      if (XmlText(one, "Key") == key) upload_ids->push_back(XmlText(one, "UploadId"));
      rest.remove_prefix(end);
    }
    if (XmlText(r.body, "IsTruncated") != "true") return Status::Ok();
    query = {{"key-marker", XmlText(r.body, "NextKeyMarker")}, {"prefix", key},
             {"upload-id-marker", XmlText(r.body, "NextUploadIdMarker")}, {"uploads", ""}};
  }
  return Status::Ok();
}

Status Client::Abort(const std::string& key, const std::string& upload_id) {
  Response r;
  Status st = Send("DELETE", key, {{"uploadId", upload_id}}, "", &r);
  if (st.code() == Code::kNotFound) return Status::Ok();
  return st;
}

Status Client::Exists(const std::string& key, bool* exists, uint64_t* size) {
  Response r;
  Status st = Send("HEAD", key, {}, "", &r);
  *exists = st.ok();
  if (size != nullptr) *size = r.length > 0 ? static_cast<uint64_t>(r.length) : 0;
  if (st.code() == Code::kNotFound) return Status::Ok();
  return st;
}

Status Client::Get(const std::string& key, std::string* body) {
  Response r;
  KAYAK_RETURN_IF_ERROR(Send("GET", key, {}, "", &r));
  *body = std::move(r.body);
  return Status::Ok();
}

Status Client::GetEach(const std::string& key,
                       const std::function<Status(std::string_view)>& sink) {
  Response r;
  r.sink = &sink;
  return Send("GET", key, {}, "", &r);
}

Status Client::GetRange(const std::string& key, uint64_t from, uint64_t len, std::string* body) {
  body->clear();
  if (len == 0) return Status::Ok();
  Response r;
  r.range = std::to_string(from) + "-" + std::to_string(from + len - 1);
  KAYAK_RETURN_IF_ERROR(Send("GET", key, {}, "", &r));
  *body = std::move(r.body);
  if (body->size() > len) body->resize(len);  // a server that ignored the range
  return Status::Ok();
}

Status Client::ListKeys(const std::string& prefix,
                        const std::function<void(std::string_view)>& each) {
  Pairs query = {{"list-type", "2"}, {"prefix", prefix}};
  for (int page = 0; page < 100000; ++page) {  // 100 million keys
    Response r;
    KAYAK_RETURN_IF_ERROR(Send("GET", "", query, "", &r));
    std::string_view rest = r.body;
    for (size_t at; (at = rest.find("<Contents>")) != std::string_view::npos;) {
      const size_t end = rest.find("</Contents>", at);
      if (end == std::string_view::npos) break;
      each(XmlText(rest.substr(at, end - at), "Key"));
      rest.remove_prefix(end);
    }
    if (XmlText(r.body, "IsTruncated") != "true") return Status::Ok();
    query = {{"continuation-token", XmlText(r.body, "NextContinuationToken")},
             {"list-type", "2"}, {"prefix", prefix}};
  }
  return Status::Ok();
}

Status Client::Put(const std::string& key, std::string_view bytes) {
  Response r;
  return Send("PUT", key, {}, bytes, &r);
}

Status Client::PutIfAbsent(const std::string& key, std::string_view bytes, bool* placed) {
  Response r;
  r.header = "If-None-Match: *";
  Status st = Send("PUT", key, {}, bytes, &r);
  *placed = st.ok();
  if (r.status == 412) return Status::Ok();  // PreconditionFailed: the key exists
  return st;
}

Status Client::Delete(const std::string& key) {
  Response r;
  Status st = Send("DELETE", key, {}, "", &r);
  if (st.code() == Code::kNotFound) return Status::Ok();
  return st;
}

}  // namespace kayak::s3
