// lua: a Lua 5.4 function per message, sandboxed: no io, os, require,
// package, debug or bytecode; bounded instructions, memory, time and output.
// Every step that touches the Lua state for a message (the payload into a
// table, the call, the walk over its result) runs inside a protected call or
// raises no Lua error, so a limit reached anywhere is an error on that
// message, never Lua's panic handler.
#include <lua.hpp>

#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>

#include "components.h"
#include "transforms/field_access.h"

namespace kayak {

namespace {

constexpr int kMaxDepth = 64;  // nesting of tables converted to and from JSON
using SteadyClock = std::chrono::steady_clock;

// The time limit inside Lua's pattern functions (string.find, match, gmatch,
// gsub), which run in C where the count hook never fires: a timer on the
// calling thread sends a signal at the deadline, and its handler raises the
// limit's error. Lua raises its own errors from inside those functions (a
// malformed pattern, a memory error), so this one unwinds the same way; the
// allocator is the one place it must not (they call no other).
class PatternTimer {
 public:
  ~PatternTimer() {
    if (tid_ != 0) timer_delete(timer_);
  }
  // Fires at `deadline`, then every 10 ms, on the calling thread.
  void Arm(SteadyClock::time_point deadline) {
    const pid_t tid = static_cast<pid_t>(::syscall(SYS_gettid));
    if (tid_ != tid) {
      if (tid_ != 0) timer_delete(timer_);
      tid_ = 0;
      sigevent ev{};
      ev.sigev_notify = SIGEV_THREAD_ID;
      ev.sigev_signo = Signal();
      ev._sigev_un._tid = tid;
      if (timer_create(CLOCK_MONOTONIC, &ev, &timer_) != 0) return;
      tid_ = tid;
    }
    const int64_t left = std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - SteadyClock::now())
               .count());
    itimerspec spec{};
    spec.it_value.tv_sec = left / 1000000000;
    spec.it_value.tv_nsec = left % 1000000000;
    spec.it_interval.tv_nsec = 10000000;  // again, should one land in the allocator
    armed_ = timer_settime(timer_, 0, &spec, nullptr) == 0;
  }
  // Only an armed timer costs a system call: most messages never arm it.
  void Disarm() {
    if (!armed_) return;
    itimerspec spec{};
    timer_settime(timer_, 0, &spec, nullptr);
    armed_ = false;
  }
  static int Signal() { return SIGRTMIN + 5; }

 private:
  timer_t timer_{};
  pid_t tid_ = 0;
  bool armed_ = false;
};

// What a call may use and has used. The hook, the allocator and the
// signal's handler read it on the thread that runs the call.
struct LuaLimits {
  size_t memory_max = 0;
  size_t memory_used = 0;
  int64_t instructions_max = 0;
  int64_t instructions_used = 0;
  int64_t time_max_ms = 0;
  SteadyClock::time_point deadline = SteadyClock::time_point::max();
  lua_State* L = nullptr;
  PatternTimer timer;
  volatile sig_atomic_t expired = 0;     // the deadline has passed
  volatile sig_atomic_t in_alloc = 0;    // inside LimitedAlloc
  volatile sig_atomic_t in_pattern = 0;  // inside a pattern function's C code
  volatile sig_atomic_t cut_in_pattern = 0;  // the signal raised its error there
};

thread_local LuaLimits* t_running = nullptr;  // the call on this thread

void* LimitedAlloc(void* ud, void* ptr, size_t osize, size_t nsize) {
  auto* lim = static_cast<LuaLimits*>(ud);
  const size_t old = ptr != nullptr ? osize : 0;
  lim->in_alloc = 1;
  void* p = nullptr;
  if (nsize == 0) {
    std::free(ptr);
    lim->memory_used -= old;
  } else if (nsize > old &&
             (lim->memory_used + (nsize - old) > lim->memory_max || lim->expired)) {
    p = nullptr;  // a memory error (or the deadline, seen here)
  } else {
    p = std::realloc(ptr, nsize);
    if (p != nullptr) lim->memory_used = lim->memory_used - old + nsize;
  }
  lim->in_alloc = 0;
  return p;
}

LuaLimits* LimitsOf(lua_State* L) {
  void* ud = nullptr;
  lua_getallocf(L, &ud);
  return static_cast<LuaLimits*>(ud);
}

int TimeLimitError(lua_State* L, const LuaLimits& lim) {
  return luaL_error(L, "time limit of %d ms reached", static_cast<int>(lim.time_max_ms));
}

constexpr int kHookEvery = 1000;

void CountHook(lua_State* L, lua_Debug*) {
  LuaLimits* lim = LimitsOf(L);
  lim->instructions_used += kHookEvery;
  if (lim->instructions_used > lim->instructions_max) {
    luaL_error(L, "instruction limit of %d reached", static_cast<int>(lim->instructions_max));
  }
  if (lim->expired || SteadyClock::now() >= lim->deadline) {
    lim->expired = 1;
    TimeLimitError(L, *lim);
  }
}

void OnTimeSignal(int) {
  LuaLimits* lim = t_running;
  if (lim == nullptr) return;
  lim->expired = 1;
  if (lim->in_alloc || !lim->in_pattern) return;  // seen by the allocator or the code after
  lim->in_pattern = 0;
  lim->cut_in_pattern = 1;
  TimeLimitError(lim->L, *lim);
}

void InstallTimeSignal() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = OnTimeSignal;
    sigemptyset(&sa.sa_mask);
    // The handler leaves by longjmp (Lua's error), which restores no signal
    // mask: the signal is not blocked while it runs, so the next arrives.
    sa.sa_flags = SA_NODEFER | SA_RESTART;
    sigaction(PatternTimer::Signal(), &sa, nullptr);
  });
}

// Calls upvalue 1 (one of Lua's pattern functions) with the arguments, the
// time limit's signal armed while it runs.
int PatternCall(lua_State* L) {
  LuaLimits* lim = LimitsOf(L);
  const int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  const bool outer = lim->in_pattern == 0;
  if (outer) {
    if (lim->expired) return TimeLimitError(L, *lim);
    lim->timer.Arm(lim->deadline);
    lim->in_pattern = 1;
  }
  lua_call(L, n, LUA_MULTRET);
  if (outer) {
    lim->in_pattern = 0;
    lim->timer.Disarm();
  }
  if (lim->expired) return TimeLimitError(L, *lim);
  return lua_gettop(L);
}

// gsub's replacement function or table (upvalue 1), called out of the
// pattern function: Lua code again, kept by the count hook, where the
// signal must not cut in.
int OutOfPattern(lua_State* L) {
  LuaLimits* lim = LimitsOf(L);
  const int n = lua_gettop(L);
  const sig_atomic_t was = lim->in_pattern;
  lim->in_pattern = 0;
  if (lim->expired) return TimeLimitError(L, *lim);
  lua_pushvalue(L, lua_upvalueindex(1));
  if (lua_istable(L, -1)) {
    lua_pushvalue(L, 1);  // the first capture, or the whole match
    lua_gettable(L, -2);
  } else {
    lua_insert(L, 1);
    lua_call(L, n, 1);
  }
  if (lim->expired) return TimeLimitError(L, *lim);
  lim->in_pattern = was;
  return 1;
}

// gsub(s, pattern, repl, n) with a function or table repl wrapped.
int PatternGsub(lua_State* L) {
  if (lua_type(L, 3) == LUA_TFUNCTION || lua_type(L, 3) == LUA_TTABLE) {
    lua_pushvalue(L, 3);
    lua_pushcclosure(L, OutOfPattern, 1);
    lua_replace(L, 3);
  }
  return PatternCall(L);
}

// gmatch(s, pattern, init): the matching happens when its iterator is
// called, so the iterator is what gets the signal armed.
int PatternGmatch(lua_State* L) {
  const int n = lua_gettop(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, n, 1);
  lua_pushcclosure(L, PatternCall, 1);
  return 1;
}

void WrapPatternFunctions(lua_State* L) {
  lua_getglobal(L, "string");
  const std::pair<const char*, lua_CFunction> wraps[] = {
      {"find", PatternCall}, {"match", PatternCall}, {"gsub", PatternGsub},
      {"gmatch", PatternGmatch}};
  for (const auto& [name, fn] : wraps) {
    lua_getfield(L, -1, name);
    lua_pushcclosure(L, fn, 1);
    lua_setfield(L, -2, name);
  }
  lua_pop(L, 1);
}

// Runs in the fresh state before the user's script: removes what the
// sandbox forbids and restricts load() to text chunks.
const char* kSandbox = R"(
dofile = nil
loadfile = nil
require = nil
package = nil
print = nil
collectgarbage = nil
string.dump = nil
local raw_load = load
load = function(chunk, name, mode, env)
  return raw_load(chunk, name, "t", env or _ENV)
end
)";

// Builds the table for `v`, inside the protected call (a memory error here
// is an error on the message). Holds nothing that needs a destructor: an
// error leaves by longjmp.
void PushJson(lua_State* L, const Json& v, int depth) {
  luaL_checkstack(L, 4, "json too deep");
  switch (v.type()) {
    case Json::value_t::boolean: lua_pushboolean(L, v.get<bool>()); return;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: lua_pushinteger(L, v.get<int64_t>()); return;
    case Json::value_t::number_float: lua_pushnumber(L, v.get<double>()); return;
    case Json::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      lua_pushlstring(L, s.data(), s.size());
      return;
    }
    case Json::value_t::array: {
      lua_createtable(L, static_cast<int>(v.size()), 0);
      if (depth < kMaxDepth) {
        lua_Integer i = 1;
        for (auto it = v.begin(); it != v.end(); ++it) {
          PushJson(L, *it, depth + 1);
          lua_rawseti(L, -2, i++);
        }
      }
      return;
    }
    case Json::value_t::object: {
      lua_createtable(L, 0, static_cast<int>(v.size()));
      if (depth < kMaxDepth) {
        for (auto it = v.begin(); it != v.end(); ++it) {
          if (it->is_null()) continue;  // nil cannot be stored in a table
          const std::string& k = it.key();
          lua_pushlstring(L, k.data(), k.size());
          PushJson(L, *it, depth + 1);
          lua_rawset(L, -3);
        }
      }
      return;
    }
    default: lua_pushnil(L); return;
  }
}

// The protected part of a message: process(the payload as a table). Its one
// argument is a light userdata pointing at the parsed payload.
int ProtectedProcess(lua_State* L) {
  const auto* fields = static_cast<const Json*>(lua_touserdata(L, 1));
  lua_settop(L, 0);
  lua_getglobal(L, "process");
  PushJson(L, *fields, 0);
  lua_call(L, 1, 1);
  return 1;
}

// The result as JSON, outside the protected call: nothing here raises a Lua
// error (lua_checkstack reports, lua_next and the reads do not allocate).
// `*budget` is what the JSON may still take, in bytes: a table shared by
// many fields counts at each, so no result outgrows the memory limit.
Status ToJson(lua_State* L, int idx, Json* out, int depth, int64_t* budget) {
  idx = lua_absindex(L, idx);
  *budget -= 8;
  if (*budget < 0) return Status::Invalid("lua returned a value larger than max_memory_bytes as JSON");
  switch (lua_type(L, idx)) {
    case LUA_TNIL: *out = nullptr; return Status::Ok();
    case LUA_TBOOLEAN: *out = lua_toboolean(L, idx) != 0; return Status::Ok();
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) {
        *out = static_cast<int64_t>(lua_tointeger(L, idx));
      } else {
        const double d = lua_tonumber(L, idx);
        if (!std::isfinite(d)) return Status::Invalid("lua returned a number that is not finite");
        *out = d;
      }
      return Status::Ok();
    case LUA_TSTRING: {
      size_t len = 0;
      const char* s = lua_tolstring(L, idx, &len);
      *budget -= static_cast<int64_t>(len);
      if (*budget < 0) {
        return Status::Invalid("lua returned a value larger than max_memory_bytes as JSON");
      }
      *out = std::string(s, len);
      return Status::Ok();
    }
    case LUA_TTABLE: {
      if (depth >= kMaxDepth) return Status::Invalid("lua table nested too deep");
      if (!lua_checkstack(L, 4)) return Status::Invalid("lua table nested too deep");
      const lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, idx));
      size_t count = 0;
      lua_pushnil(L);
      while (lua_next(L, idx) != 0) {
        ++count;
        lua_pop(L, 1);
      }
      if (n > 0 && static_cast<size_t>(n) == count) {
        *out = Json::array();
        for (lua_Integer i = 1; i <= n; ++i) {
          lua_rawgeti(L, idx, i);
          Json e;
          Status st = ToJson(L, -1, &e, depth + 1, budget);
          lua_pop(L, 1);
          KAYAK_RETURN_IF_ERROR(st);
          out->push_back(std::move(e));
        }
        return Status::Ok();
      }
      // Lua tables have no order; keys are sorted so the same table always
      // gives the same bytes (the caller puts an input's own keys first).
      std::map<std::string, Json> fields;
      lua_pushnil(L);
      while (lua_next(L, idx) != 0) {
        std::string key;
        if (lua_type(L, -2) == LUA_TSTRING) {
          size_t len = 0;
          const char* s = lua_tolstring(L, -2, &len);
          key.assign(s, len);
        } else if (lua_type(L, -2) == LUA_TNUMBER) {
          key = lua_isinteger(L, -2) ? std::to_string(lua_tointeger(L, -2))
                                     : std::to_string(lua_tonumber(L, -2));
        } else {
          lua_pop(L, 2);
          return Status::Invalid("lua table has a key that is neither a string nor a number");
        }
        Json e;
        Status st = ToJson(L, -1, &e, depth + 1, budget);
        lua_pop(L, 1);
        if (!st.ok()) {
          lua_pop(L, 1);
          return st;
        }
        fields[key] = std::move(e);
      }
      *out = Json::object();
      for (auto& [k, v] : fields) (*out)[k] = std::move(v);
      return Status::Ok();
    }
    default:
      return Status::Invalid(std::string("lua returned a ") + luaL_typename(L, idx) +
                             ", which has no JSON form");
  }
}

class LuaTransform final : public Transform {
 public:
  ~LuaTransform() override {
    if (L_ != nullptr) lua_close(L_);
  }

  // Creates the state and runs the script once; the script must define
  // process(msg). Errors go to `error`.
  bool Init(const std::string& script, size_t memory_max, int64_t instructions_max,
            int64_t time_max_ms, std::string* error) {
    script_ = script;
    limits_.memory_max = memory_max;
    limits_.instructions_max = instructions_max;
    limits_.time_max_ms = time_max_ms;
    InstallTimeSignal();
    return NewState(error);
  }

  Status Process(Batch* batch) override {
    return KeepMessages(batch, [&](Message& m, bool* keep) -> Status {
      bool dropped = false;
      KAYAK_RETURN_IF_ERROR(One(m, &dropped));
      *keep = !dropped;
      return Status::Ok();
    });
  }

 private:
  // Marks the call on this thread for the time limit's signal.
  struct Running {
    explicit Running(LuaLimits* lim) { t_running = lim; }
    ~Running() {
      t_running->timer.Disarm();
      t_running->in_pattern = 0;
      t_running = nullptr;
    }
  };

  // A fresh state with the sandbox and the script run once in it (its
  // limits hold there too).
  bool NewState(std::string* error) {
    if (L_ != nullptr) lua_close(L_);
    limits_.memory_used = 0;
    limits_.expired = 0;
    limits_.deadline = SteadyClock::now() + std::chrono::milliseconds(limits_.time_max_ms);
    L_ = lua_newstate(LimitedAlloc, &limits_);
    limits_.L = L_;
    if (L_ == nullptr) {
      *error = "cannot create a Lua state";
      return false;
    }
    static const luaL_Reg kLibs[] = {{LUA_GNAME, luaopen_base},         {LUA_TABLIBNAME, luaopen_table},
                                     {LUA_STRLIBNAME, luaopen_string},  {LUA_MATHLIBNAME, luaopen_math},
                                     {LUA_UTF8LIBNAME, luaopen_utf8},   {nullptr, nullptr}};
    for (const luaL_Reg* lib = kLibs; lib->func != nullptr; ++lib) {
      luaL_requiref(L_, lib->name, lib->func, 1);
      lua_pop(L_, 1);
    }
    if (luaL_loadbufferx(L_, kSandbox, std::strlen(kSandbox), "=sandbox", "t") != LUA_OK ||
        lua_pcall(L_, 0, 0, 0) != LUA_OK) {
      *error = lua_tostring(L_, -1);
      return false;
    }
    WrapPatternFunctions(L_);
    lua_sethook(L_, CountHook, LUA_MASKCOUNT, kHookEvery);
    limits_.instructions_used = 0;
    const Running running(&limits_);
    if (luaL_loadbufferx(L_, script_.data(), script_.size(), "=script", "t") != LUA_OK ||
        lua_pcall(L_, 0, 0, 0) != LUA_OK) {
      *error = lua_tostring(L_, -1) != nullptr ? lua_tostring(L_, -1) : "error";
      return false;
    }
    lua_getglobal(L_, "process");
    const bool is_fn = lua_isfunction(L_, -1);
    lua_pop(L_, 1);
    if (!is_fn) {
      *error = "the script must define a function process(msg)";
      return false;
    }
    return true;
  }

  Status One(Message& m, bool* dropped) {
    // lua needs the whole document: parsed here, for it alone.
    KAYAK_RETURN_IF_ERROR(m.CheckJson());
    const Json fields = Json::parse(m.payload(), nullptr, false);
    if (L_ == nullptr) {
      std::string error;
      if (!NewState(&error)) return Status::Invalid("lua: the script did not start again: " + error);
    }
    const int top = lua_gettop(L_);
    limits_.instructions_used = 0;
    limits_.expired = 0;
    limits_.cut_in_pattern = 0;
    limits_.deadline = SteadyClock::now() + std::chrono::milliseconds(limits_.time_max_ms);
    int rc = LUA_OK;
    {
      const Running running(&limits_);
      // Neither push allocates (a light C function, a pointer).
      lua_pushcfunction(L_, ProtectedProcess);
      lua_pushlightuserdata(L_, const_cast<Json*>(&fields));
      rc = lua_pcall(L_, 1, 1, 0);
    }
    if (rc != LUA_OK) {
      std::string err = lua_tostring(L_, -1) != nullptr ? lua_tostring(L_, -1) : "lua error";
      if (limits_.expired) {
        err = "time limit of " + std::to_string(limits_.time_max_ms) + " ms reached";
      }
      lua_settop(L_, top);
      if (limits_.cut_in_pattern) {
        // Cut short at any point of Lua's own C code: that state is not
        // used again; the next message gets a fresh one.
        lua_close(L_);
        L_ = nullptr;
      }
      return Status::Invalid("lua: " + err);
    }
    if (lua_isnil(L_, -1) || (lua_isboolean(L_, -1) && !lua_toboolean(L_, -1))) {
      *dropped = true;
      lua_settop(L_, top);
      return Status::Ok();
    }
    Json out;
    int64_t budget = static_cast<int64_t>(limits_.memory_max);
    Status st = ToJson(L_, -1, &out, 0, &budget);
    lua_settop(L_, top);
    KAYAK_RETURN_IF_ERROR(st);
    // Fields the message had keep their places; new ones follow in name order.
    if (out.is_object() && fields.is_object()) {
      Json ordered = Json::object();
      for (const auto& [k, v] : fields.items()) {
        auto it = out.find(k);
        if (it != out.end()) ordered[k] = std::move(*it);
      }
      for (auto& [k, v] : out.items()) {
        if (!ordered.contains(k)) ordered[k] = std::move(v);
      }
      out = std::move(ordered);
    }
    m.set_payload(out.dump(-1, ' ', false, Json::error_handler_t::replace), true);
    return Status::Ok();
  }

  lua_State* L_ = nullptr;  // null after a time limit cut a pattern short
  LuaLimits limits_;
  std::string script_;
};

}  // namespace

ComponentDef LuaDef() {
  ComponentDef d;
  d.kind = "transform";
  d.type = "lua";
  d.help =
      "Runs `script` once, then calls its `process(msg)` for each message with the payload as a "
      "table. Return a table to replace the payload, or nil (or false) to drop the message. "
      "Sandboxed: only the base, string, table, math and utf8 libraries; no io, os, require, "
      "print or bytecode. JSON nulls inside objects arrive as absent keys.";
  d.checkpoint = "nothing (globals the script keeps are not checkpointed)";
  d.bad_input =
      "a payload that is not JSON, a Lua error, the instruction, memory or time limit, a returned value larger than the memory limit as JSON, or one with no JSON form (a function, a table with mixed keys) is a transform error; a script that does not compile or define process is a config error";
  d.props = {
      {"script", PropType::kString, true, "", "Lua source defining process(msg)"},
      PropDef{"max_instructions", PropType::kInt, false, "1000000", "per message", PropRole::kTuning}.AtLeast(kHookEvery),
      PropDef{"max_memory_bytes", PropType::kInt, false, "67108864",
              "for the whole Lua state; also bounds the JSON a call returns",
              PropRole::kTuning}.AtLeast(1048576).Unit("bytes"),
      PropDef{"max_time_ms", PropType::kInt, false, "1000",
              "per message, pattern functions (string.find, match, gmatch, gsub) included",
              PropRole::kTuning}.AtLeast(1).Unit("ms"),
  };
  d.make_transform = [](const Options& o, const ComponentContext&) -> std::unique_ptr<Transform> {
    if (o.failed()) return nullptr;
    auto t = std::make_unique<LuaTransform>();
    std::string error;
    if (!t->Init(o.String("script"), static_cast<size_t>(o.Int("max_memory_bytes")),
                 o.Int("max_instructions"), o.Int("max_time_ms"), &error)) {
      o.Error("script", error);
      return nullptr;
    }
    return t;
  };
  return d;
}

}  // namespace kayak
