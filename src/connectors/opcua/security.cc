#include "connectors/opcua/security.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/core_names.h>
#include <openssl/params.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace kayak::opcua {

namespace {

constexpr Policy kPolicies[] = {
    {"Basic256Sha256", "http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256", false, "SHA1",
     "http://www.w3.org/2001/04/xmlenc#rsa-oaep",
     "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256", 32, 2048, 4096},
    {"Aes128_Sha256_RsaOaep", "http://opcfoundation.org/UA/SecurityPolicy#Aes128_Sha256_RsaOaep",
     false, "SHA1", "http://www.w3.org/2001/04/xmlenc#rsa-oaep",
     "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256", 16, 2048, 4096},
    {"Aes256_Sha256_RsaPss", "http://opcfoundation.org/UA/SecurityPolicy#Aes256_Sha256_RsaPss",
     true, "SHA256", "http://opcfoundation.org/UA/security/rsa-oaep-sha2-256",
     "http://opcfoundation.org/UA/security/rsa-pss-sha2-256", 32, 2048, 4096},
};

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;
using Cert = std::unique_ptr<X509, decltype(&X509_free)>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

const unsigned char* Bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// OpenSSL's reason for the last failure, and its queue emptied.
std::string OpensslReason() {
  const unsigned long e = ERR_peek_last_error();
  std::string why;
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    why = buf;
  }
  ERR_clear_error();
  return why.empty() ? "unknown reason" : why;
}

// Certificates of a file: PEM (any number) or one DER.
std::vector<Cert> ReadCertificates(const std::string& file, std::string* why) {
  std::vector<Cert> out;
  Bio bio(BIO_new_file(file.c_str(), "rb"), BIO_free);
  if (!bio) {
    *why = "cannot be read: " + OpensslReason();
    return out;
  }
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) out.emplace_back(x, X509_free);
  ERR_clear_error();
  if (out.empty()) {
    BIO_reset(bio.get());
    if (X509* x = d2i_X509_bio(bio.get(), nullptr)) out.emplace_back(x, X509_free);
  }
  if (out.empty()) *why = "holds no certificate (PEM or DER): " + OpensslReason();
  return out;
}

std::string Der(X509* x) {
  const int n = i2d_X509(x, nullptr);
  if (n <= 0) return {};
  std::string der(static_cast<size_t>(n), '\0');
  auto* p = reinterpret_cast<unsigned char*>(der.data());
  i2d_X509(x, &p);
  return der;
}

Cert FromDer(std::string_view der) {
  const unsigned char* p = Bytes(der);
  return Cert(d2i_X509(nullptr, &p, static_cast<long>(der.size())), X509_free);
}

std::string UriOf(X509* x) {
  std::string uri;
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(x, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return uri;
  for (int i = 0; i < sk_GENERAL_NAME_num(names) && uri.empty(); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    if (n->type == GEN_URI) {
      const ASN1_IA5STRING* s = n->d.uniformResourceIdentifier;
      uri.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                 static_cast<size_t>(ASN1_STRING_length(s)));
    }
  }
  GENERAL_NAMES_free(names);
  return uri;
}

bool SetUpSignature(const Policy& policy, EVP_PKEY_CTX* pctx) {
  if (!policy.pss) return EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) > 0;
  return EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PSS_PADDING) > 0 &&
         EVP_PKEY_CTX_set_rsa_pss_saltlen(pctx, RSA_PSS_SALTLEN_DIGEST) > 0;
}

bool SetUpOaep(const Policy& policy, EVP_PKEY_CTX* ctx) {
  return EVP_PKEY_CTX_set_rsa_padding(ctx, RSA_PKCS1_OAEP_PADDING) > 0 &&
         EVP_PKEY_CTX_set_rsa_oaep_md(ctx, EVP_get_digestbyname(policy.oaep_digest)) > 0;
}

}  // namespace

const Policy* FindPolicy(std::string_view name_or_uri) {
  for (const auto& p : kPolicies) {
    if (p.name == name_or_uri || p.uri == name_or_uri) return &p;
  }
  return nullptr;
}

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names{"None"};
  for (const auto& p : kPolicies) names.emplace_back(p.name);
  return names;
}

Status LoadIdentity(const std::string& certificate_file, const std::string& key_file,
                    Identity* out) {
  std::string why;
  std::vector<Cert> certs = ReadCertificates(certificate_file, &why);
  if (certs.empty()) return Status::Invalid(certificate_file + " " + why);
  Bio bio(BIO_new_file(key_file.c_str(), "rb"), BIO_free);
  if (!bio) return Status::Invalid(key_file + " cannot be read: " + OpensslReason());
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) {
    ERR_clear_error();
    BIO_reset(bio.get());
    key = d2i_PrivateKey_bio(bio.get(), nullptr);
  }
  if (key == nullptr) {
    return Status::Invalid(key_file + " holds no private key (PEM or DER, not encrypted): " +
                           OpensslReason());
  }
  out->key.reset(key);
  if (EVP_PKEY_get_base_id(key) != EVP_PKEY_RSA) {
    return Status::Invalid(key_file + " is not an RSA key (OPC UA's policies sign with RSA)");
  }
  if (X509_check_private_key(certs[0].get(), key) != 1) {
    ERR_clear_error();
    return Status::Invalid(key_file + " is not the key of " + certificate_file);
  }
  out->certificate = Der(certs[0].get());
  out->application_uri = UriOf(certs[0].get());
  return Status::Ok();
}

Status PublicKey(std::string_view certificate_der, EvpKey* out) {
  Cert cert = FromDer(certificate_der);
  if (!cert) return Status::Invalid("a certificate that cannot be read: " + OpensslReason());
  out->reset(X509_get_pubkey(cert.get()));
  if (!*out || EVP_PKEY_get_base_id(out->get()) != EVP_PKEY_RSA) {
    return Status::Invalid("a certificate without an RSA key");
  }
  return Status::Ok();
}

std::string Thumbprint(std::string_view certificate_der) {
  std::string out(SHA_DIGEST_LENGTH, '\0');
  SHA1(Bytes(certificate_der), certificate_der.size(),
       reinterpret_cast<unsigned char*>(out.data()));
  return out;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    out.push_back(kDigits[(static_cast<uint8_t>(c) >> 4) & 0xf]);
    out.push_back(kDigits[static_cast<uint8_t>(c) & 0xf]);
  }
  return out;
}

size_t KeyBytes(EVP_PKEY* key) { return static_cast<size_t>(EVP_PKEY_get_size(key)); }

size_t PlainBlockBytes(const Policy& policy, EVP_PKEY* key) {
  const size_t digest = std::string_view(policy.oaep_digest) == "SHA256" ? 32 : 20;
  return KeyBytes(key) - 2 * digest - 2;
}

Status Sign(const Policy& policy, EVP_PKEY* key, std::string_view data, std::string* out) {
  MdCtx ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_PKEY_CTX* pctx = nullptr;
  size_t len = KeyBytes(key);
  out->assign(len, '\0');
  if (!ctx || EVP_DigestSignInit(ctx.get(), &pctx, EVP_sha256(), nullptr, key) <= 0 ||
      !SetUpSignature(policy, pctx) ||
      EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(out->data()), &len, Bytes(data),
                     data.size()) <= 0) {
    return Status::Internal("OpenSSL cannot sign: " + OpensslReason());
  }
  out->resize(len);
  return Status::Ok();
}

bool Verify(const Policy& policy, EVP_PKEY* key, std::string_view data, std::string_view sig) {
  MdCtx ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_PKEY_CTX* pctx = nullptr;
  const bool ok = ctx && EVP_DigestVerifyInit(ctx.get(), &pctx, EVP_sha256(), nullptr, key) > 0 &&
                  SetUpSignature(policy, pctx) &&
                  EVP_DigestVerify(ctx.get(), Bytes(sig), sig.size(), Bytes(data), data.size()) == 1;
  ERR_clear_error();
  return ok;
}

Status Encrypt(const Policy& policy, EVP_PKEY* public_key, std::string_view plain,
               std::string* out) {
  PkeyCtx ctx(EVP_PKEY_CTX_new(public_key, nullptr), EVP_PKEY_CTX_free);
  if (!ctx || EVP_PKEY_encrypt_init(ctx.get()) <= 0 || !SetUpOaep(policy, ctx.get())) {
    return Status::Internal("OpenSSL cannot set up RSA-OAEP: " + OpensslReason());
  }
  const size_t block = PlainBlockBytes(policy, public_key);
  const size_t cipher_block = KeyBytes(public_key);
  out->clear();
  out->reserve((plain.size() + block - 1) / block * cipher_block);
  for (size_t at = 0; at < plain.size(); at += block) {
    const size_t n = std::min(block, plain.size() - at);
    size_t len = cipher_block;
    const size_t start = out->size();
    out->resize(start + cipher_block);
    if (EVP_PKEY_encrypt(ctx.get(), reinterpret_cast<unsigned char*>(out->data() + start), &len,
                         Bytes(plain.substr(at, n)), n) <= 0) {
      return Status::Internal("OpenSSL cannot encrypt: " + OpensslReason());
    }
    out->resize(start + len);
  }
  return Status::Ok();
}

Status Decrypt(const Policy& policy, EVP_PKEY* private_key, std::string_view cipher,
               std::string* out) {
  const size_t block = KeyBytes(private_key);
  if (cipher.size() % block != 0) {
    return Status::Unavailable("an encrypted part of " + std::to_string(cipher.size()) +
                               " bytes, not whole blocks of " + std::to_string(block));
  }
  PkeyCtx ctx(EVP_PKEY_CTX_new(private_key, nullptr), EVP_PKEY_CTX_free);
  if (!ctx || EVP_PKEY_decrypt_init(ctx.get()) <= 0 || !SetUpOaep(policy, ctx.get())) {
    return Status::Internal("OpenSSL cannot set up RSA-OAEP: " + OpensslReason());
  }
  out->clear();
  for (size_t at = 0; at < cipher.size(); at += block) {
    const size_t start = out->size();
    size_t len = block;
    out->resize(start + block);
    if (EVP_PKEY_decrypt(ctx.get(), reinterpret_cast<unsigned char*>(out->data() + start), &len,
                         Bytes(cipher.substr(at, block)), block) <= 0) {
      return Status::Unavailable("a block that does not decrypt with kayak's key: " +
                                 OpensslReason());
    }
    out->resize(start + len);
  }
  return Status::Ok();
}

std::string HmacSha256(std::string_view key, std::initializer_list<std::string_view> parts) {
  // One HMAC for the process; a context per call (the fetch is the costly part).
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(mac),
                                                               EVP_MAC_CTX_free);
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                               OSSL_PARAM_construct_end()};
  std::string out(32, '\0');
  size_t len = 0;
  bool ok = ctx && EVP_MAC_init(ctx.get(), Bytes(key), key.size(), params) == 1;
  for (const auto part : parts) ok = ok && EVP_MAC_update(ctx.get(), Bytes(part), part.size()) == 1;
  ok = ok && EVP_MAC_final(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &len,
                           out.size()) == 1;
  if (!ok) out.assign(32, '\0');  // verifies nothing, signs nothing a server takes
  ERR_clear_error();
  return out;
}

std::string PSha256(std::string_view secret, std::string_view seed, size_t n) {
  std::string out;
  std::string a(seed);  // A(0)
  while (out.size() < n) {
    a = HmacSha256(secret, {a});  // A(i)
    out += HmacSha256(secret, {a, seed});
  }
  out.resize(n);
  return out;
}

SymKeys DeriveKeys(const Policy& policy, std::string_view secret, std::string_view seed) {
  const std::string stream =
      PSha256(secret, seed, kSigningKeyBytes + policy.encrypting_key + kAesBlock);
  SymKeys k;
  k.signing = stream.substr(0, kSigningKeyBytes);
  k.encrypting = stream.substr(kSigningKeyBytes, policy.encrypting_key);
  k.iv = stream.substr(kSigningKeyBytes + policy.encrypting_key, kAesBlock);
  return k;
}

Status AesCbc(bool encrypt, const SymKeys& keys, char* data, size_t n) {
  if (n % kAesBlock != 0) {
    return Status::Unavailable("an encrypted part of " + std::to_string(n) +
                               " bytes, not whole AES blocks");
  }
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx(EVP_CIPHER_CTX_new(),
                                                                      EVP_CIPHER_CTX_free);
  const EVP_CIPHER* cipher = keys.encrypting.size() == 16 ? EVP_aes_128_cbc() : EVP_aes_256_cbc();
  int len = 0;
  auto* p = reinterpret_cast<unsigned char*>(data);
  if (!ctx ||
      EVP_CipherInit_ex(ctx.get(), cipher, nullptr, Bytes(keys.encrypting), Bytes(keys.iv),
                        encrypt ? 1 : 0) <= 0 ||
      EVP_CIPHER_CTX_set_padding(ctx.get(), 0) <= 0 ||
      EVP_CipherUpdate(ctx.get(), p, &len, p, static_cast<int>(n)) <= 0) {
    return Status::Internal("OpenSSL AES-CBC failed: " + OpensslReason());
  }
  return Status::Ok();
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n));
  return out;
}

bool TrustCertificate(std::string_view certificate_der, const std::string& trust_file,
                      std::string* why) {
  std::vector<Cert> trusted = ReadCertificates(trust_file, why);
  if (trusted.empty()) {
    *why = trust_file + " " + *why;
    return false;
  }
  Cert cert = FromDer(certificate_der);
  if (!cert) {
    *why = "the server's certificate cannot be read";
    return false;
  }
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  for (const auto& t : trusted) X509_STORE_add_cert(store.get(), t.get());
  // A pinned server certificate is an anchor of its own, as is a CA.
  X509_STORE_set_flags(store.get(), X509_V_FLAG_PARTIAL_CHAIN);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      X509_STORE_CTX_free);
  if (!ctx || X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) {
    *why = "OpenSSL cannot check a certificate: " + OpensslReason();
    return false;
  }
  const bool ok = X509_verify_cert(ctx.get()) == 1;
  if (!ok) {
    *why = std::string("the server's certificate (SHA-1 ") + Hex(Thumbprint(certificate_der)) +
           ") is not trusted by " + trust_file + ": " +
           X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
  }
  ERR_clear_error();
  return ok;
}

}  // namespace kayak::opcua
