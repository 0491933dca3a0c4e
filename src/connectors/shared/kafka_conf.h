// What the kafka connector and the http input's write-ahead to Kafka share:
// librdkafka configuration from the user's `properties`, checked at config
// time, and librdkafka's error objects.
#pragma once

#include <librdkafka/rdkafka.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kayak/component.h"

namespace kayak::kafka {

using Properties = std::vector<std::pair<std::string, std::string>>;

// Applies `props` to a new conf; nullptr with `error` naming a bad one.
rd_kafka_conf_t* MakeConf(const Properties& props, std::string* error);

// Checks the user's properties at config time: a bad name is a config error.
void CheckProperties(const Options& o, const Properties& props);

// The `sasl` option: {mechanism: PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512,
// username, password} (secret: the API shows it as ***).
PropDef SaslPropDef();

// librdkafka's properties for the `tls` block (connectors/shared/tls.h) and
// `sasl`: security.protocol (SSL, SASL_SSL or SASL_PLAINTEXT), ssl.* and
// sasl.*; the user's `properties` come after them and may override any.
// Records errors on `o` (a mechanism librdkafka does not know, a missing
// user, tls.server_name, which librdkafka cannot check).
Properties SecurityProperties(const Options& o);

// The `brokers` option as librdkafka's bootstrap list.
std::string Brokers(const Options& o);

// What to add to a failed login's text (`reason`, librdkafka's): librdkafka
// before 2.6.1 repeats the client's nonce in its SCRAM proof, which Kafka 4
// brokers refuse as invalid credentials (librdkafka#4895). "" otherwise.
std::string ScramHint(std::string_view reason);

// Takes librdkafka's error object: its text, and whether retrying may help.
std::string TakeError(rd_kafka_error_t* e, bool* retriable = nullptr);

}  // namespace kayak::kafka
