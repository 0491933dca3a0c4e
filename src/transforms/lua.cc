// lua: a Lua 5.4 function per message, sandboxed: no io, os, require,
// package, debug or bytecode; bounded instructions and memory.
#include <lua.hpp>

#include <cmath>
#include <map>

#include "components.h"
#include "transforms/field_access.h"

namespace kayak {

namespace {

constexpr int kMaxDepth = 64;  // nesting of tables converted to and from JSON

struct LuaLimits {
  size_t memory_max = 0;
  size_t memory_used = 0;
  int64_t instructions_max = 0;
  int64_t instructions_used = 0;
};

void* LimitedAlloc(void* ud, void* ptr, size_t osize, size_t nsize) {
  auto* lim = static_cast<LuaLimits*>(ud);
  const size_t old = ptr != nullptr ? osize : 0;
  if (nsize == 0) {
    std::free(ptr);
    lim->memory_used -= old;
    return nullptr;
  }
  if (nsize > old && lim->memory_used + (nsize - old) > lim->memory_max) return nullptr;
  void* p = std::realloc(ptr, nsize);
  if (p != nullptr) lim->memory_used = lim->memory_used - old + nsize;
  return p;
}

constexpr int kHookEvery = 1000;

void CountHook(lua_State* L, lua_Debug*) {
  void* ud = nullptr;
  lua_getallocf(L, &ud);
  auto* lim = static_cast<LuaLimits*>(ud);
  lim->instructions_used += kHookEvery;
  if (lim->instructions_used > lim->instructions_max) {
    luaL_error(L, "instruction limit of %d reached", static_cast<int>(lim->instructions_max));
  }
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
        for (const auto& e : v) {
          PushJson(L, e, depth + 1);
          lua_rawseti(L, -2, i++);
        }
      }
      return;
    }
    case Json::value_t::object: {
      lua_createtable(L, 0, static_cast<int>(v.size()));
      if (depth < kMaxDepth) {
        for (const auto& [k, e] : v.items()) {
          if (e.is_null()) continue;  // nil cannot be stored in a table
          lua_pushlstring(L, k.data(), k.size());
          PushJson(L, e, depth + 1);
          lua_rawset(L, -3);
        }
      }
      return;
    }
    default: lua_pushnil(L); return;
  }
}

Status ToJson(lua_State* L, int idx, Json* out, int depth) {
  idx = lua_absindex(L, idx);
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
      *out = std::string(s, len);
      return Status::Ok();
    }
    case LUA_TTABLE: {
      if (depth >= kMaxDepth) return Status::Invalid("lua table nested too deep");
      luaL_checkstack(L, 4, "table too deep");
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
          Status st = ToJson(L, -1, &e, depth + 1);
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
        Status st = ToJson(L, -1, &e, depth + 1);
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
            std::string* error) {
    limits_.memory_max = memory_max;
    limits_.instructions_max = instructions_max;
    L_ = lua_newstate(LimitedAlloc, &limits_);
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
    lua_sethook(L_, CountHook, LUA_MASKCOUNT, kHookEvery);
    limits_.instructions_used = 0;
    if (luaL_loadbufferx(L_, script.data(), script.size(), "=script", "t") != LUA_OK ||
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

  Status Process(Batch* batch) override {
    return KeepMessages(batch, [&](Message& m, bool* keep) -> Status {
      bool dropped = false;
      KAYAK_RETURN_IF_ERROR(One(m, &dropped));
      *keep = !dropped;
      return Status::Ok();
    });
  }

 private:
  Status One(Message& m, bool* dropped) {
    // lua needs the whole document: parsed here, for it alone.
    KAYAK_RETURN_IF_ERROR(m.CheckJson());
    const Json fields = Json::parse(m.payload(), nullptr, false);
    const int top = lua_gettop(L_);
    lua_getglobal(L_, "process");
    PushJson(L_, fields, 0);
    limits_.instructions_used = 0;
    if (lua_pcall(L_, 1, 1, 0) != LUA_OK) {
      std::string err = lua_tostring(L_, -1) != nullptr ? lua_tostring(L_, -1) : "lua error";
      lua_settop(L_, top);
      return Status::Invalid("lua: " + err);
    }
    if (lua_isnil(L_, -1) || (lua_isboolean(L_, -1) && !lua_toboolean(L_, -1))) {
      *dropped = true;
      lua_settop(L_, top);
      return Status::Ok();
    }
    Json out;
    Status st = ToJson(L_, -1, &out, 0);
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

  lua_State* L_ = nullptr;
  LuaLimits limits_;
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
      "a payload that is not JSON, a Lua error, the instruction or memory limit, or a returned value with no JSON form (a function, a table with mixed keys) is a transform error; a script that does not compile or define process is a config error";
  d.props = {
      {"script", PropType::kString, true, "", "Lua source defining process(msg)"},
      PropDef{"max_instructions", PropType::kInt, false, "1000000", "per message", PropRole::kTuning}.AtLeast(kHookEvery),
      PropDef{"max_memory_bytes", PropType::kInt, false, "67108864", "for the whole Lua state",
       PropRole::kTuning}.AtLeast(1048576).Unit("bytes"),
  };
  d.make_transform = [](const Options& o, const ComponentContext&) -> std::unique_ptr<Transform> {
    if (o.failed()) return nullptr;
    auto t = std::make_unique<LuaTransform>();
    std::string error;
    if (!t->Init(o.String("script"), static_cast<size_t>(o.Int("max_memory_bytes")),
                 o.Int("max_instructions"), &error)) {
      o.Error("script", error);
      return nullptr;
    }
    return t;
  };
  return d;
}

}  // namespace kayak
