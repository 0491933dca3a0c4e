#include "connectors/kafka/conf.h"

namespace kayak::kafka {

rd_kafka_conf_t* MakeConf(const Properties& props, std::string* error) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  for (const auto& [k, v] : props) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
      *error = err;
      rd_kafka_conf_destroy(conf);
      return nullptr;
    }
  }
  return conf;
}

void CheckProperties(const Options& o, const Properties& props) {
  std::string error;
  rd_kafka_conf_t* conf = MakeConf(props, &error);
  if (conf == nullptr) {
    o.Error("properties", error);
  } else {
    rd_kafka_conf_destroy(conf);
  }
}

std::string Brokers(const Options& o) {
  std::string out;
  for (const auto& b : o.Strings("brokers")) {
    if (!out.empty()) out += ",";
    out += b;
  }
  return out;
}

std::string TakeError(rd_kafka_error_t* e, bool* retriable) {
  std::string why = rd_kafka_error_string(e);
  if (retriable != nullptr) *retriable = rd_kafka_error_is_retriable(e);
  rd_kafka_error_destroy(e);
  return why;
}

}  // namespace kayak::kafka
