// The s3 output: rows appended to objects uploaded in parts (multipart
// upload), each object closed at the first row boundary at or past
// `max_object_bytes` (or after `max_object_secs`, or at a stop), and the part
// not yet uploaded kept in the checkpoint. docs/components.md, "s3";
// docs/durability.md, "s3".
//
// Parts are cut at row boundaries once `part_bytes` is reached (with
// compression, once the compressed part holds that much), so part and
// object boundaries depend only on the rows: a replay after a restore cuts
// the same parts, uploads them again under the same numbers (S3 keeps the
// last), and completes byte-identical objects. An object completed after the
// checkpoint that still shows it open is found with HEAD at the restore; the
// replayed rows it already holds (its size) are passed over, not uploaded
// under another key.
#include <deque>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/crash_point.h"
#include "common/json_util.h"
#include "common/log.h"
#include "connectors/s3/client.h"
#include "connectors/s3/codec.h"
#include "kayak/component.h"

namespace kayak {

namespace {

struct S3Options {
  s3::Endpoint endpoint;
  std::string key;  // template: {{date}} {{hour}} {{seq}}
  uint64_t part_bytes = 5242880;
  uint64_t max_object_bytes = 1073741824;
  int64_t max_object_secs = 300;
  s3::Compression compression = s3::Compression::kNone;
};

// One object being written: rows go into it until it is closed; it is
// completed once every part is up.
struct Object {
  uint64_t seq = 0;
  std::string key;
  std::string upload_id;  // "" until the first part is uploaded
  std::vector<std::pair<int, std::string>> parts;  // uploaded: number, ETag
  int next_part = 1;
  uint64_t bytes = 0;  // rows written into it so far
  bool closed = false;
  int64_t opened_ms = 0;
};

// A part cut from an object's rows, waiting to be uploaded.
struct Piece {
  uint64_t seq = 0;
  int number = 0;
  std::string bytes;
};

std::string Pad10(uint64_t n) {
  std::string s = std::to_string(n);
  return std::string(s.size() < 10 ? 10 - s.size() : 0, '0') + s;
}

std::string RenderKey(const std::string& tmpl, uint64_t seq, int64_t now_ms) {
  const std::time_t t = static_cast<std::time_t>(now_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char date[16], hour[8];
  std::strftime(date, sizeof(date), "%Y-%m-%d", &tm);
  std::strftime(hour, sizeof(hour), "%H", &tm);
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    auto at = [&](std::string_view v) { return tmpl.compare(i, v.size(), v) == 0; };
    if (at("{{date}}")) {
      out += date;
      i += 8;
    } else if (at("{{hour}}")) {
      out += hour;
      i += 8;
    } else if (at("{{seq}}")) {
      out += Pad10(seq);
      i += 7;
    } else {
      out += tmpl[i++];
    }
  }
  return out;
}

// The sequence number of `key` when it is a key `tmpl` renders (any date
// and hour), else 0.
uint64_t SeqOfKey(std::string_view tmpl, std::string_view key) {
  uint64_t seq = 0;
  size_t k = 0;
  auto digits = [&](size_t n) {
    if (key.size() - k < n) return false;
    for (size_t j = 0; j < n; ++j) {
      if (key[k + j] < '0' || key[k + j] > '9') return false;
    }
    return true;
  };
  for (size_t i = 0; i < tmpl.size();) {
    auto at = [&](std::string_view v) { return tmpl.compare(i, v.size(), v) == 0; };
    if (at("{{date}}")) {  // YYYY-MM-DD
      if (!digits(4) || key.size() - k < 10 || key[k + 4] != '-' || key[k + 7] != '-') return 0;
      k += 10;
      i += 8;
    } else if (at("{{hour}}")) {
      if (!digits(2)) return 0;
      k += 2;
      i += 8;
    } else if (at("{{seq}}")) {
      if (!digits(10)) return 0;
      uint64_t n = 0;
      for (; k < key.size() && key[k] >= '0' && key[k] <= '9'; ++k) n = n * 10 + (key[k] - '0');
      seq = n;
      i += 7;
    } else {
      if (k >= key.size() || key[k] != tmpl[i]) return 0;
      ++k;
      ++i;
    }
  }
  return k == key.size() ? seq : 0;
}

class S3Output final : public Output {
 public:
  S3Output(S3Options o, const ComponentContext& ctx)
      : o_(std::move(o)),
        client_(o_.endpoint),
        compressor_(s3::MakeCompressor(o_.compression)),
        clock_(ctx.clock),
        stats_(ctx.stats) {}

  // Without a restored state: one past the highest sequence number of any
  // key under the template's fixed prefix (every date and hour), so a restart
  // never writes over an object of an earlier run, in this hour or a later one.
  Status Open() override {
    if (opened_) return Status::Ok();
    if (restored_) {
      KAYAK_RETURN_IF_ERROR(FindCompletedAfterRestore());
    } else {
      uint64_t highest = 0;
      KAYAK_RETURN_IF_ERROR(client_.ListKeys(
          o_.key.substr(0, o_.key.find("{{")),
          [&](std::string_view key) { highest = std::max(highest, SeqOfKey(o_.key, key)); }));
      next_seq_ = highest + 1;
      if (highest > 0) KLOG_INFO("s3 output: objects of an earlier run go up to {}; this one "
                                 "starts at {}", highest, next_seq_);
    }
    opened_ = true;
    return Status::Ok();
  }

  // What came before goes out first: a batch is taken only while the store
  // answers, so a store that is down holds the pipeline (retried by the
  // runner). The batch's own parts go out now or at the next call.
  Status Write(const Batch& batch) override {
    KAYAK_RETURN_IF_ERROR(Flush());
    for (const auto& m : batch.messages) Append(m.payload());
    Report(Flush(), "the batch is kept; sent again before the next one");
    return Status::Ok();
  }

  void Tick(int64_t now_ms) override {
    // (Not an object the replay is still passing over: it is complete already.)
    if (o_.max_object_secs > 0 && !objs_.empty() && !objs_.back().closed &&
        objs_.back().seq != skip_seq_ && objs_.back().bytes > 0 &&
        now_ms - objs_.back().opened_ms >= o_.max_object_secs * 1000) {
      CloseOpen();
    }
    if (!queue_.empty() || (!objs_.empty() && objs_.front().closed)) {
      Report(Flush(), "tried again");
    }
  }

  // The barrier: what is uploaded is named (key, upload id, parts and their
  // ETags); what is not, its bytes, go into the checkpoint.
  Status Checkpoint(uint64_t id, std::string* state) override {
    (void)id;
    Report(Flush(), "its bytes go into the checkpoint");
    nlohmann::json objs = nlohmann::json::array(), pieces = nlohmann::json::array();
    for (const auto& ob : objs_) {
      nlohmann::json parts = nlohmann::json::array();
      for (const auto& [n, etag] : ob.parts) parts.push_back({n, etag});
      objs.push_back({{"seq", ob.seq}, {"key", ob.key}, {"upload_id", ob.upload_id},
                      {"parts", parts}, {"next_part", ob.next_part}, {"bytes", ob.bytes},
                      {"closed", ob.closed}, {"opened_ms", ob.opened_ms}});
    }
    for (const auto& p : queue_) pieces.push_back({p.seq, p.number, p.bytes.size()});
    *state = DumpJson(nlohmann::json{{"version", 1}, {"next_seq", next_seq_}, {"objects", objs},
                            {"pieces", pieces}, {"open_bytes", open_.size()},
                            {"next_try", next_try_}});
    state->push_back('\n');
    for (const auto& p : queue_) state->append(p.bytes);
    state->append(open_);
    return Status::Ok();
  }

  Status RestoreState(std::string_view state) override {
    if (state.empty()) return Status::Ok();
    const size_t nl = state.find('\n');
    auto j = nlohmann::json::parse(state.substr(0, nl), nullptr, false);
    if (nl == std::string_view::npos || !j.is_object() || j.value("version", 0) != 1) {
      return Status::Corruption("s3 output: not a state this version wrote");
    }
    try {
      std::string_view rest = state.substr(nl + 1);
      next_seq_ = j["next_seq"].get<uint64_t>();
      next_try_ = j.value("next_try", uint64_t{0});
      for (const auto& o : j["objects"]) {
        Object ob;
        ob.seq = o["seq"].get<uint64_t>();
        ob.key = o["key"].get<std::string>();
        ob.upload_id = o["upload_id"].get<std::string>();
        for (const auto& p : o["parts"]) ob.parts.emplace_back(p[0].get<int>(), p[1].get<std::string>());
        ob.next_part = o["next_part"].get<int>();
        ob.bytes = o["bytes"].get<uint64_t>();
        ob.closed = o["closed"].get<bool>();
        ob.opened_ms = o["opened_ms"].get<int64_t>();
        objs_.push_back(std::move(ob));
      }
      for (const auto& p : j["pieces"]) {
        const size_t len = p[2].get<size_t>();
        if (len > rest.size()) return Status::Corruption("s3 output: a part is cut short");
        queue_.push_back({p[0].get<uint64_t>(), p[1].get<int>(), std::string(rest.substr(0, len))});
        rest.remove_prefix(len);
      }
      if (rest.size() != j["open_bytes"].get<size_t>()) {
        return Status::Corruption("s3 output: the open part's length does not match");
      }
      open_.assign(rest);
    } catch (const nlohmann::json::exception& e) {
      return Status::Corruption(std::string("s3 output: unreadable state: ") + e.what());
    }
    restored_ = true;
    return Status::Ok();
  }

  // A graceful stop: every object is closed and completed.
  Status Close() override {
    if (!opened_) return Status::Ok();
    CloseOpen();
    Status st = Flush();
    if (!st.ok()) KLOG_ERROR("{}; the rows not uploaded are lost unless a checkpoint holds them", st.message());
    return st;
  }

 private:
  void Append(std::string_view payload) {
    if (objs_.empty() || objs_.back().closed) {
      Object ob;
      ob.seq = next_seq_++;
      ob.opened_ms = clock_->NowMs();
      ob.key = RenderKey(o_.key, ob.seq, ob.opened_ms);
      objs_.push_back(std::move(ob));
      next_try_ = 0;  // each object's parts follow from its own rows
    }
    Object& ob = objs_.back();
    const uint64_t row = payload.size() + 1;
    if (skip_seq_ == ob.seq) {
      // Completed after the checkpoint: these rows are in it already, if
      // they are the same rows again. An input that does not replay (or a
      // pipeline that gives other rows) brings new ones: they go to a new
      // object, the completed one stays as it is.
      if (!IsReplayed(payload)) {
        KLOG_WARN("s3 output: {} was completed after the checkpoint, and the rows coming now are "
                  "not its rows again (the input does not replay them); they go to a new object",
                  ob.key);
        objs_.pop_back();
        skip_seq_ = 0;
        replay_expect_.clear();
        Append(payload);
        return;
      }
      ob.bytes += row;
      if (ob.bytes >= skip_bytes_) {
        if (ob.bytes != skip_bytes_) {
          KLOG_ERROR("s3 output: {} holds {} bytes, the replay gave {}", ob.key, skip_bytes_,
                     ob.bytes);
        }
        objs_.pop_back();
        skip_seq_ = 0;
      }
      return;
    }
    open_.append(payload);
    open_.push_back('\n');
    ob.bytes += row;
    if (open_.size() >= (next_try_ != 0 ? next_try_ : o_.part_bytes)) TryCut(ob);
    if (ob.bytes >= o_.max_object_bytes) CloseOpen();
  }

  // Without compression a part is cut once its rows reach part_bytes. With
  // it, once the compressed part holds part_bytes (S3 refuses a smaller part
  // but an object's last): the rows are compressed when they reach
  // `next_try_`, the size the last try or cut predicts from its compression
  // ratio, with a margin; a try that falls short sets it again from its own
  // ratio. It starts at part_bytes with each object and goes into the
  // checkpoint, so the parts are a function of the object's rows and a
  // replay after a restore tries and cuts at the same rows.
  void TryCut(Object& ob) {
    if (compressor_ == nullptr) {
      Cut(ob);
      return;
    }
    Piece p{ob.seq, ob.next_part, {}};
    Compress(&p.bytes);
    const uint64_t raw = open_.size(), packed = std::max<uint64_t>(p.bytes.size(), 1);
    const double ratio = static_cast<double>(raw) / static_cast<double>(packed);
    if (packed < o_.part_bytes) {  // too small a part yet
      next_try_ = std::max<uint64_t>(
          raw + 1, static_cast<uint64_t>(static_cast<double>(o_.part_bytes) * ratio * 1.05));
      return;
    }
    next_try_ = static_cast<uint64_t>(static_cast<double>(o_.part_bytes) * ratio * 1.02);
    ob.next_part++;
    queue_.push_back(std::move(p));
    open_.clear();
  }

  void Compress(std::string* out) {
    if (Status st = compressor_->Compress(open_, out); !st.ok()) {
      // Only a library fault or no memory: the rows were taken and cannot
      // be kept, so the process stops and the restore replays them.
      KLOG_ERROR("{}; stopping", st.message());
      std::abort();
    }
  }

  // A part is cut from the open rows and, with `compression`, compressed
  // whole (one gzip member or zstd frame): equal rows give equal parts.
  void Cut(Object& ob) {
    if (open_.empty()) return;
    if (compressor_ == nullptr) {
      queue_.push_back({ob.seq, ob.next_part++, std::move(open_)});
    } else {
      Piece p{ob.seq, ob.next_part++, {}};
      Compress(&p.bytes);
      queue_.push_back(std::move(p));
    }
    open_.clear();
  }

  void CloseOpen() {
    if (objs_.empty() || objs_.back().closed) return;
    Object& ob = objs_.back();
    if (ob.seq == skip_seq_) {  // completed before the crash: nothing to do
      objs_.pop_back();
      skip_seq_ = 0;
      return;
    }
    if (ob.bytes == 0) {
      objs_.pop_back();
      --next_seq_;
      return;
    }
    Cut(ob);
    ob.closed = true;
  }

  Object* Find(uint64_t seq) {
    for (auto& ob : objs_) {
      if (ob.seq == seq) return &ob;
    }
    return nullptr;
  }

  // Uploads the parts cut so far, in order, and completes every closed
  // object whose parts are all up.
  Status Flush() {
    while (!queue_.empty()) {
      Piece& p = queue_.front();
      Object* ob = Find(p.seq);
      if (ob == nullptr) {  // passed over after a restore
        queue_.pop_front();
        continue;
      }
      if (ob->upload_id.empty()) {
        KAYAK_RETURN_IF_ERROR(Check(client_.CreateUpload(ob->key, &ob->upload_id)));
      }
      std::string etag;
      KAYAK_RETURN_IF_ERROR(Check(client_.UploadPart(ob->key, ob->upload_id, p.number, p.bytes, &etag)));
      kayak::CrashPoint("s3_after_upload_part");
      bool replaced = false;
      for (auto& [n, e] : ob->parts) {
        if (n == p.number) {
          e = etag;
          replaced = true;
        }
      }
      if (!replaced) ob->parts.emplace_back(p.number, etag);
      queue_.pop_front();
    }
    while (!objs_.empty() && objs_.front().closed) {
      Object& ob = objs_.front();
      KAYAK_RETURN_IF_ERROR(Check(client_.Complete(ob.key, ob.upload_id, ob.parts)));
      kayak::CrashPoint("s3_after_complete");
      KLOG_INFO("s3 output: completed {} ({} bytes, {} parts)", ob.key, ob.bytes, ob.parts.size());
      AbortLeftOver(ob.key);
      objs_.pop_front();
    }
    return Status::Ok();
  }

  // A run that died after it started an upload of `key` and before a
  // checkpoint named it left that upload open (its parts are stored, and
  // billed, until it is aborted); the replay wrote the same object under a
  // new upload. Once the object is complete, every upload still open for its
  // key is one of those. A store that cannot list them is told once in the
  // log; the object is complete either way.
  void AbortLeftOver(const std::string& key) {
    std::vector<std::string> ids;
    Status st = client_.ListUploads(key, &ids);
    for (const auto& id : ids) {
      if (!st.ok()) break;
      st = client_.Abort(key, id);
      if (st.ok()) KLOG_INFO("s3 output: aborted upload {} of {}, left by an earlier run", id, key);
    }
    if (!st.ok() && !told_abort_) {
      told_abort_ = true;
      KLOG_WARN("s3 output: cannot abort the uploads an earlier run left open for {}: {}", key,
                st.message());
    }
  }

  // An upload that failed outside the runner's retry (the batch was taken):
  // the card says retrying until one goes through.
  void Report(const Status& st, const char* what) {
    if (stats_ == nullptr) return;
    if (st.ok()) {
      if (stats_->state() == ComponentState::kRetrying) stats_->SetState(ComponentState::kRunning);
      return;
    }
    KLOG_WARN("{} ({})", st.message(), what);
    stats_->RecordError(st.message());
    stats_->SetState(ComponentState::kRetrying);
  }

  // A permanent error (a bad bucket, bad credentials) goes on the card with
  // S3's code; the runner holds the pipeline under checkpointing either way.
  Status Check(Status st) {
    if (!st.ok() && !st.retryable() && stats_ != nullptr) stats_->RecordError(st.message());
    return st;
  }

  // Whether `payload` and its newline are the next bytes of the completed
  // object past the checkpoint's rows (past the bytes kept: taken as so).
  bool IsReplayed(std::string_view payload) {
    if (replay_pos_ >= replay_expect_.size()) return true;
    const std::string_view want = std::string_view(replay_expect_).substr(replay_pos_);
    const size_t n = std::min(payload.size(), want.size());
    if (payload.substr(0, n) != want.substr(0, n)) return false;
    if (want.size() > payload.size() && want[payload.size()] != '\n') return false;
    replay_pos_ += payload.size() + 1;
    return true;
  }

  // After a restore: an object the checkpoint shows unfinished may have been
  // completed before the crash. Closed ones are then done; the open one's
  // replayed rows are passed over up to its size, the first of them checked
  // against what the object holds past the checkpoint's rows.
  Status FindCompletedAfterRestore() {
    for (auto it = objs_.begin(); it != objs_.end();) {
      bool exists = false;
      uint64_t size = 0;
      KAYAK_RETURN_IF_ERROR(client_.Exists(it->key, &exists, &size));
      if (!exists) {
        ++it;
        continue;
      }
      replay_expect_.clear();
      replay_pos_ = 0;
      if (!it->closed && o_.compression != s3::Compression::kNone) {
        // The rows it holds are its uncompressed size: read through once,
        // keeping the first bytes past the checkpoint's rows.
        const uint64_t from = it->bytes;
        uint64_t raw = 0;
        auto counter = s3::MakeRawCounter(o_.compression, [&](std::string_view chunk) {
          const uint64_t end = raw + chunk.size();
          if (end > from && replay_expect_.size() < kReplayCheckBytes) {
            const size_t skip = raw < from ? static_cast<size_t>(from - raw) : 0;
            replay_expect_.append(chunk.substr(skip, std::min<size_t>(
                chunk.size() - skip, kReplayCheckBytes - replay_expect_.size())));
          }
          raw = end;
        });
        KAYAK_RETURN_IF_ERROR(client_.GetEach(
            it->key, [&counter](std::string_view chunk) { return counter->Feed(chunk); }));
        KAYAK_RETURN_IF_ERROR(counter->Finish(&size));
      } else if (!it->closed && size > it->bytes) {
        KAYAK_RETURN_IF_ERROR(client_.GetRange(
            it->key, it->bytes, std::min<uint64_t>(size - it->bytes, kReplayCheckBytes),
            &replay_expect_));
      }
      KLOG_INFO("s3 output: {} was completed after the checkpoint; not written again", it->key);
      AbortLeftOver(it->key);
      if (!it->closed) {
        skip_seq_ = it->seq;
        skip_bytes_ = size;
        const uint64_t seq = it->seq;
        std::erase_if(queue_, [seq](const Piece& p) { return p.seq == seq; });
        // What the checkpoint held of it is in the object already.
        open_.clear();
        it->parts.clear();
        if (it->bytes >= size) {
          it = objs_.erase(it);
          skip_seq_ = 0;
          continue;
        }
        ++it;
        continue;
      }
      it = objs_.erase(it);
    }
    return Status::Ok();
  }

  // Not uploaded yet: the parts cut, and the open object's rows.
  size_t MemoryBytes() const override {
    size_t n = open_.capacity();
    for (const auto& piece : queue_) n += piece.bytes.capacity();
    return n;
  }

  const S3Options o_;
  s3::Client client_;
  const std::unique_ptr<s3::Compressor> compressor_;  // null without compression
  const Clock* clock_;
  ComponentStats* const stats_;
  bool opened_ = false;
  bool restored_ = false;
  uint64_t next_try_ = 0;  // with compression: the rows' size of the next try (0: part_bytes)
  bool told_abort_ = false;  // that the store would not list or abort left-over uploads
  uint64_t next_seq_ = 1;
  std::deque<Object> objs_;  // oldest first; the back one is open unless closed
  std::deque<Piece> queue_;  // parts cut and not yet uploaded, in order
  std::string open_;         // the open object's rows not yet cut into a part
  uint64_t skip_seq_ = 0;    // an object completed after the restored checkpoint
  uint64_t skip_bytes_ = 0;  // its size
  // The first bytes it holds past the checkpoint's rows: the rows passed
  // over are checked against them (replay_pos_: how far).
  static constexpr size_t kReplayCheckBytes = 64 * 1024;
  std::string replay_expect_;
  size_t replay_pos_ = 0;
};

}  // namespace

ComponentDef S3OutputDef() {
  ComponentDef d;
  d.kind = "output";
  d.type = "s3";
  d.help =
      "Writes each message and a newline into objects of `bucket` with multipart uploads "
      "(libcurl, AWS Signature Version 4). Rows are cut into parts at row boundaries once a "
      "part has `part_bytes`; with `compression`, once the compressed part has `part_bytes` "
      "(tried at the size of rows the last part's compression ratio predicts); an object is completed at the first row boundary at or past "
      "`max_object_bytes`, after `max_object_secs`, or at a stop. Keys come from `key`: "
      "{{date}} (YYYY-MM-DD) and {{hour}} (HH) of the wall clock when the object opens, in UTC, "
      "and {{seq}}, the object's number, ten digits: from 1, or, without a checkpoint, past "
      "the highest of any key the template made under its fixed prefix.";
  d.checkpoint = "the open objects (key, upload id, the parts uploaded and their ETags) and the "
                 "bytes not yet uploaded; a restore goes on with the same upload and part "
                 "numbers, and an object completed after the checkpoint is found with HEAD and "
                 "not written again (rows that are not its rows again go to a new object)";
  d.bad_input = "a refused connection, a 5xx or SlowDown is retried holding the pipeline; a 4xx "
                "(no such bucket, bad credentials) is an error on the card with S3's code and "
                "message, retried the same way under checkpointing";
  d.props = {
      PropDef{"endpoint", PropType::kString, false, "",
              "http(s)://host:port of an S3-compatible store (default: AWS for `region`)",
              PropRole::kTuning},
      PropDef{"region", PropType::kString, false, "us-east-1", "the region signed for",
              PropRole::kTuning},
      TlsPropDef(),
      PropDef{"bucket", PropType::kString, true, "", "the bucket"}.NonEmpty(),
      PropDef{"key", PropType::kString, false, "kayak/{{date}}/{{hour}}/part-{{seq}}.ndjson",
              "the object key: {{date}}, {{hour}} and {{seq}} are replaced"}
          .NonEmpty(),
      PropDef{"path_style", PropType::kBool, false, "false",
              "address the bucket in the path (host/bucket/key) instead of the host name",
              PropRole::kTuning},
      PropDef{"access_key_id", PropType::kString, true, "", "the access key id, as ${ENV}",
              PropRole::kTuning}
          .NonEmpty(),
      PropDef{"secret_access_key", PropType::kString, true, "",
              "the secret access key, as ${ENV}", PropRole::kTuning}
          .NonEmpty()
          .Secret(),
      PropDef{"session_token", PropType::kString, false, "", "a session token, as ${ENV}",
              PropRole::kTuning}
          .Secret(),
      PropDef{"part_bytes", PropType::kInt, false, "5242880",
              "a part is cut at the first row boundary at or past this, compressed bytes with "
              "`compression`; S3 refuses parts under 5 MiB but the last (smaller values are for "
              "tests and other stores)",
              PropRole::kIdentity}
          .Range(1, 5368709120.0)
          .Unit("bytes"),
      PropDef{"max_object_bytes", PropType::kInt, false, "1073741824",
              "an object is completed at the first row boundary at or past this"}
          .Range(1, 5e12)
          .Unit("bytes"),
      PropDef{"max_object_secs", PropType::kInt, false, "300",
              "an object is completed once it has been open this long (0: never)",
              PropRole::kTuning}
          .Range(0, 86400 * 7)
          .Unit("s"),
      PropDef{"compression", PropType::kString, false, "none",
              "none, gzip or zstd: each part is compressed on its own (one gzip member or zstd "
              "frame), so an object is one valid .gz or .zst file; name `key` to match"}
          .OneOf({"none", "gzip", "zstd"}),
  };
  d.make_output = [](const Options& o, const ComponentContext& ctx) -> std::unique_ptr<Output> {
    S3Options so;
    so.endpoint.endpoint = o.String("endpoint");
    so.endpoint.region = o.String("region");
    so.endpoint.bucket = o.String("bucket");
    so.endpoint.path_style = o.Bool("path_style");
    so.endpoint.credentials = {o.String("access_key_id"), o.String("secret_access_key"),
                               o.String("session_token")};
    so.endpoint.tls = ReadTlsOptions(o);
    if (so.endpoint.tls.enabled && so.endpoint.endpoint.rfind("http://", 0) == 0) {
      o.Error("tls", "the endpoint is http://: name it https:// to use TLS");
    }
    if (!so.endpoint.tls.server_name.empty()) {
      o.Error("tls", "server_name is not supported by the s3 output: libcurl checks the "
                     "endpoint's host; name the endpoint by the certificate's name");
    }
    so.key = o.String("key");
    so.part_bytes = static_cast<uint64_t>(o.Int("part_bytes"));
    so.max_object_bytes = static_cast<uint64_t>(o.Int("max_object_bytes"));
    so.max_object_secs = o.Int("max_object_secs");
    s3::ParseCompression(o.String("compression"), &so.compression);
    if (so.key.find("{{seq}}") == std::string::npos) {
      o.Error("key", "the key needs {{seq}}: every object of the output has its own");
    }
    if (!so.endpoint.endpoint.empty() && so.endpoint.endpoint.rfind("http://", 0) != 0 &&
        so.endpoint.endpoint.rfind("https://", 0) != 0) {
      o.Error("endpoint", "http://host:port or https://host:port");
    }
    if (o.failed()) return nullptr;
    return std::make_unique<S3Output>(std::move(so), ctx);
  };
  return d;
}

}  // namespace kayak
