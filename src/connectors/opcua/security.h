// The cryptography of the OPC UA security policies the opcua input speaks
// (OPC UA Part 6, 6.7; Part 7, 6.6): the asymmetric signatures and RSA-OAEP
// encryption of OpenSecureChannel and of the session's proofs, the keys each
// side derives from the two nonces (P_SHA256), and the HMAC-SHA256 and
// AES-CBC of every message after. OpenSSL does the arithmetic.
#pragma once

#include <openssl/evp.h>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kayak/status.h"

namespace kayak::opcua {

inline constexpr std::string_view kPolicyNoneUri = "http://opcfoundation.org/UA/SecurityPolicy#None";

// A SecurityPolicy other than None.
struct Policy {
  std::string_view name;  // "Basic256Sha256", as configured
  std::string_view uri;
  bool pss;                       // RSA-PSS-SHA256 signatures, else RSASSA-PKCS1-v1_5 SHA-256
  const char* oaep_digest;        // "SHA1" or "SHA256"
  std::string_view oaep_uri;      // the algorithm of a password encrypted under this policy
  std::string_view signature_uri;  // the algorithm of a SignatureData made under it
  size_t encrypting_key;          // AES key bytes: 32 (AES-256) or 16 (AES-128)
  int min_key_bits, max_key_bits;  // the RSA keys it allows
};
// The symmetric parts every supported policy shares.
inline constexpr size_t kSigningKeyBytes = 32;  // HMAC-SHA256
inline constexpr size_t kSymSignatureBytes = 32;
inline constexpr size_t kAesBlock = 16;
inline constexpr size_t kNonceBytes = 32;

// The policy of a name ("Basic256Sha256") or URI; nullptr for None and for
// what is not supported.
const Policy* FindPolicy(std::string_view name_or_uri);
// The names FindPolicy takes, for an option's choices.
std::vector<std::string> PolicyNames();

using EvpKey = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

// An application instance certificate (or a user's) with its private key.
struct Identity {
  std::string certificate;      // DER
  EvpKey key{nullptr, EVP_PKEY_free};
  std::string application_uri;  // the URI in its subjectAltName, if any
};
// Reads a certificate and its key (each PEM or DER). Invalid with the file
// and the reason when either cannot be read, when they do not belong
// together or when the key is not RSA.
Status LoadIdentity(const std::string& certificate_file, const std::string& key_file,
                    Identity* out);
// The public key of a DER certificate.
Status PublicKey(std::string_view certificate_der, EvpKey* out);
// The SHA-1 of a DER certificate (its thumbprint), raw and as hex.
std::string Thumbprint(std::string_view certificate_der);
std::string Hex(std::string_view bytes);
// The key's size in bytes (its signature's and cipher block's size).
size_t KeyBytes(EVP_PKEY* key);
// Bytes of plain text one RSA-OAEP block of `key` holds under `policy`.
size_t PlainBlockBytes(const Policy& policy, EVP_PKEY* key);

Status Sign(const Policy& policy, EVP_PKEY* key, std::string_view data, std::string* out);
bool Verify(const Policy& policy, EVP_PKEY* key, std::string_view data, std::string_view sig);
// RSA-OAEP block by block: `plain` is split into PlainBlockBytes pieces.
Status Encrypt(const Policy& policy, EVP_PKEY* public_key, std::string_view plain,
               std::string* out);
Status Decrypt(const Policy& policy, EVP_PKEY* private_key, std::string_view cipher,
               std::string* out);

// One side's keys of a security token.
struct SymKeys {
  std::string signing, encrypting, iv;
};
// Part 6, 6.7.5: P_SHA256(secret, seed) cut into the signing key, the
// encrypting key and the initialization vector. A client's own keys take
// the server's nonce as secret and its own as seed; the server's keys the
// other way round.
SymKeys DeriveKeys(const Policy& policy, std::string_view secret, std::string_view seed);
// The P_SHA256 stream of RFC 5246, 5: `n` bytes.
std::string PSha256(std::string_view secret, std::string_view seed, size_t n);
// HMAC-SHA256 of the parts, one after the other.
std::string HmacSha256(std::string_view key, std::initializer_list<std::string_view> parts);
// AES-CBC without padding of its own, in place: `n` a multiple of 16.
Status AesCbc(bool encrypt, const SymKeys& keys, char* data, size_t n);
std::string RandomBytes(size_t n);

// Checks a server's certificate against the certificates of `trust_file`
// (PEM, one or several; or one DER): the certificate itself, or an issuer
// it chains to, and valid now. False with `*why` otherwise.
bool TrustCertificate(std::string_view certificate_der, const std::string& trust_file,
                      std::string* why);

}  // namespace kayak::opcua
