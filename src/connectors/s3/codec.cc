#include "connectors/s3/codec.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>

namespace kayak::s3 {

bool ParseCompression(std::string_view name, Compression* out) {
  if (name == "none") {
    *out = Compression::kNone;
  } else if (name == "gzip") {
    *out = Compression::kGzip;
  } else if (name == "zstd") {
    *out = Compression::kZstd;
  } else {
    return false;
  }
  return true;
}

namespace {

// zlib's deflate with the gzip wrapper (window bits 15 + 16). zlib writes a
// header with no time and no name, so equal input gives equal bytes.
class GzipCompressor final : public Compressor {
 public:
  GzipCompressor() {
    ok_ = deflateInit2(&z_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) ==
          Z_OK;
  }
  ~GzipCompressor() override {
    if (ok_) deflateEnd(&z_);
  }

  Status Compress(std::string_view raw, std::string* out) override {
    if (!ok_) return Status::Internal("s3: zlib did not start");
    if (deflateReset(&z_) != Z_OK) return Status::Internal("s3: zlib reset failed");
    out->resize(deflateBound(&z_, raw.size()));
    // avail_in and avail_out are 32 bits: parts past 4 GiB go in slices.
    constexpr size_t kSlice = size_t{1} << 30;
    size_t in_left = raw.size(), out_left = out->size();
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
    z_.next_out = reinterpret_cast<Bytef*>(out->data());
    z_.avail_in = z_.avail_out = 0;
    for (;;) {
      if (z_.avail_in == 0 && in_left > 0) {
        z_.avail_in = static_cast<uInt>(std::min(in_left, kSlice));
        in_left -= z_.avail_in;
      }
      if (z_.avail_out == 0 && out_left > 0) {
        z_.avail_out = static_cast<uInt>(std::min(out_left, kSlice));
        out_left -= z_.avail_out;
      }
      const int rc = deflate(&z_, in_left == 0 ? Z_FINISH : Z_NO_FLUSH);
      if (rc == Z_STREAM_END) break;
      if (rc != Z_OK && rc != Z_BUF_ERROR) return Status::Internal("s3: gzip compression failed");
    }
    out->resize(z_.total_out);
    return Status::Ok();
  }

 private:
  std::function<void(std::string_view)> on_raw_;
  z_stream z_{};
  bool ok_ = false;
};

class ZstdCompressor final : public Compressor {
 public:
  ZstdCompressor() : cctx_(ZSTD_createCCtx()) {
    if (cctx_ != nullptr) {
      ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, 3);
      ZSTD_CCtx_setParameter(cctx_, ZSTD_c_checksumFlag, 1);
    }
  }
  ~ZstdCompressor() override { ZSTD_freeCCtx(cctx_); }

  Status Compress(std::string_view raw, std::string* out) override {
    if (cctx_ == nullptr) return Status::Internal("s3: zstd did not start");
    out->resize(ZSTD_compressBound(raw.size()));
    const size_t n = ZSTD_compress2(cctx_, out->data(), out->size(), raw.data(), raw.size());
    if (ZSTD_isError(n)) {
      return Status::Internal(std::string("s3: zstd compression failed: ") + ZSTD_getErrorName(n));
    }
    out->resize(n);
    return Status::Ok();
  }

 private:
  ZSTD_CCtx* cctx_;
};

// inflate with automatic gzip/zlib detection (window bits 15 + 32), reset
// at every member's end so that concatenated members are read through.
class GzipCounter final : public RawCounter {
 public:
  explicit GzipCounter(std::function<void(std::string_view)> on_raw) : on_raw_(std::move(on_raw)) {
    ok_ = inflateInit2(&z_, 15 + 32) == Z_OK;
  }
  ~GzipCounter() override {
    if (ok_) inflateEnd(&z_);
  }

  Status Feed(std::string_view chunk) override {
    if (!ok_) return Status::Internal("s3: zlib did not start");
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(chunk.data()));
    z_.avail_in = static_cast<uInt>(chunk.size());
    while (z_.avail_in > 0) {
      if (at_end_) {  // another member follows
        if (inflateReset(&z_) != Z_OK) return Status::Internal("s3: zlib reset failed");
        at_end_ = false;
      }
      z_.next_out = buf_;
      z_.avail_out = sizeof(buf_);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const size_t made = sizeof(buf_) - z_.avail_out;
      total_ += made;
      if (on_raw_ && made > 0) on_raw_({reinterpret_cast<const char*>(buf_), made});
      if (rc == Z_STREAM_END) {
        at_end_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return Status::Corruption("s3: the object is not gzip");
      }
    }
    return Status::Ok();
  }

  Status Finish(uint64_t* raw_bytes) override {
    if (!at_end_ && total_ > 0) return Status::Corruption("s3: the object's gzip is cut short");
    *raw_bytes = total_;
    return Status::Ok();
  }

 private:
  std::function<void(std::string_view)> on_raw_;
  z_stream z_{};
  bool ok_ = false;
  bool at_end_ = false;
  uint64_t total_ = 0;
  Bytef buf_[65536];
};

class ZstdCounter final : public RawCounter {
 public:
  explicit ZstdCounter(std::function<void(std::string_view)> on_raw)
      : on_raw_(std::move(on_raw)), dctx_(ZSTD_createDCtx()) {}
  ~ZstdCounter() override { ZSTD_freeDCtx(dctx_); }

  Status Feed(std::string_view chunk) override {
    if (dctx_ == nullptr) return Status::Internal("s3: zstd did not start");
    ZSTD_inBuffer in{chunk.data(), chunk.size(), 0};
    while (in.pos < in.size) {
      ZSTD_outBuffer out{buf_, sizeof(buf_), 0};
      const size_t rc = ZSTD_decompressStream(dctx_, &out, &in);
      if (ZSTD_isError(rc)) {
        return Status::Corruption(std::string("s3: the object is not zstd: ") + ZSTD_getErrorName(rc));
      }
      total_ += out.pos;
      if (on_raw_ && out.pos > 0) on_raw_({buf_, out.pos});
      left_ = rc;  // 0 at a frame's end
    }
    return Status::Ok();
  }

  Status Finish(uint64_t* raw_bytes) override {
    // Data still held in the context's window comes out with more calls
    // (not once a frame ended: a call then would start the next frame).
    while (left_ != 0) {
      ZSTD_inBuffer in{nullptr, 0, 0};
      ZSTD_outBuffer out{buf_, sizeof(buf_), 0};
      const size_t rc = ZSTD_decompressStream(dctx_, &out, &in);
      if (ZSTD_isError(rc)) return Status::Corruption("s3: the object's zstd is damaged");
      total_ += out.pos;
      if (on_raw_ && out.pos > 0) on_raw_({buf_, out.pos});
      left_ = rc;
      if (out.pos == 0) break;  // it needs input that will not come
    }
    if (left_ != 0) return Status::Corruption("s3: the object's zstd is cut short");
    *raw_bytes = total_;
    return Status::Ok();
  }

 private:
  std::function<void(std::string_view)> on_raw_;
  ZSTD_DCtx* dctx_;
  size_t left_ = 0;
  uint64_t total_ = 0;
  char buf_[65536];
};

}  // namespace

std::unique_ptr<Compressor> MakeCompressor(Compression c) {
  switch (c) {
    case Compression::kGzip:
      return std::make_unique<GzipCompressor>();
    case Compression::kZstd:
      return std::make_unique<ZstdCompressor>();
    case Compression::kNone:
      break;
  }
  return nullptr;
}

std::unique_ptr<RawCounter> MakeRawCounter(Compression c,
                                           std::function<void(std::string_view)> on_raw) {
  switch (c) {
    case Compression::kGzip:
      return std::make_unique<GzipCounter>(std::move(on_raw));
    case Compression::kZstd:
      return std::make_unique<ZstdCounter>(std::move(on_raw));
    case Compression::kNone:
      break;
  }
  return nullptr;
}

}  // namespace kayak::s3
