// Secrets kept out of text: what a connector, a library or a server says in
// an error can carry a password (a URL echoed back, a connection string
// quoted in a parse error). Every error a component records
// (ComponentStats::RecordError) and every log line pass through Redact.
//
// The config loader registers the value of every secret option
// (PropDef::secret) once it is read; Redact replaces each registered secret
// with "***", and the password of any URL in the text (scheme://user:PASS@)
// whether registered or not.
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <string>
#include <string_view>

namespace kayak {

// The secret pieces of an option's value: the value itself, a URL's password
// (as written and percent-decoded), and a connection string's `password=`
// value (as written up to the next `keyword=`, and each of its words). Pieces
// shorter than 4 characters are not kept (they would hide ordinary words).
void RegisterSecret(std::string_view value);

// `text` with every registered secret and every URL password replaced by "***".
std::string Redact(std::string_view text);

// The part of a connection address that names the data rather than the way
// to it, for a component's identity: a URL's scheme and path (an http(s)
// URL's query too), a libpq keyword string's `dbname`; "" for a bare
// host:port list. Host, port, user, password and connection parameters are
// left out, and a scheme that says TLS is its plain one (https as http): the
// same system reached another way, as another user or over TLS, keeps its
// state (docs/connectors.md, "Identity and tuning").
std::string AddressIdentity(std::string_view address);

}  // namespace kayak
