#include "connectors/opcua/security.h"

#include <openssl/rsa.h>

#include <gtest/gtest.h>

namespace kayak::opcua {
namespace {

std::string Unhex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

EvpKey RsaKey(unsigned bits) { return EvpKey(EVP_RSA_gen(bits), EVP_PKEY_free); }

TEST(OpcuaSecurity, PSha256IsTheTls12Prf) {
  // The TLS 1.2 PRF test vector for SHA-256 (P_SHA256 of the secret and
  // "test label" + seed), 100 bytes: P_SHA256 is that PRF without a label.
  const std::string secret = Unhex("9bbe436ba940f017b17652849a71db35");
  const std::string seed = "test label" + Unhex("a0ba9f936cda311827a6f796ffd5198c");
  EXPECT_EQ(Hex(PSha256(secret, seed, 100)),
            "e3f229ba727be17b8d122620557cd453c2aab21d07c3d495329b52d4e61edb5a6b301791e90d35c9c9"
            "a46b4e14baf9af0fa022f7077def17abfd3797c0564bab4fbc91666e9def9b97fce34f796789baa480"
            "82d122ee42c5a72e5a5110fff70187347b66");
  // A shorter stream is a prefix of the longer.
  EXPECT_EQ(PSha256(secret, seed, 20), PSha256(secret, seed, 100).substr(0, 20));
}

TEST(OpcuaSecurity, KeysAreCutFromTheStreamInOrder) {
  const std::string a(32, 'a'), b(32, 'b');
  for (const auto& name : {"Basic256Sha256", "Aes128_Sha256_RsaOaep", "Aes256_Sha256_RsaPss"}) {
    const Policy* p = FindPolicy(name);
    ASSERT_NE(p, nullptr) << name;
    EXPECT_EQ(FindPolicy(p->uri), p);
    const SymKeys k = DeriveKeys(*p, a, b);
    const std::string stream = PSha256(a, b, 32 + p->encrypting_key + 16);
    EXPECT_EQ(k.signing, stream.substr(0, 32)) << name;
    EXPECT_EQ(k.encrypting, stream.substr(32, p->encrypting_key)) << name;
    EXPECT_EQ(k.iv, stream.substr(32 + p->encrypting_key)) << name;
    // The two sides' keys differ: secret and seed swap.
    EXPECT_NE(DeriveKeys(*p, b, a).signing, k.signing);
  }
  EXPECT_EQ(FindPolicy("None"), nullptr);
  EXPECT_EQ(FindPolicy(kPolicyNoneUri), nullptr);
  EXPECT_EQ(FindPolicy("Basic128Rsa15"), nullptr);
}

TEST(OpcuaSecurity, AesCbcRoundTripsWholeBlocksOnly) {
  const SymKeys k = DeriveKeys(*FindPolicy("Basic256Sha256"), "s", "t");
  std::string text = "0123456789abcdef0123456789abcdef";
  const std::string plain = text;
  ASSERT_TRUE(AesCbc(true, k, text.data(), text.size()).ok());
  EXPECT_NE(text, plain);
  ASSERT_TRUE(AesCbc(false, k, text.data(), text.size()).ok());
  EXPECT_EQ(text, plain);
  EXPECT_FALSE(AesCbc(true, k, text.data(), 15).ok());
}

TEST(OpcuaSecurity, HmacOfPartsIsTheHmacOfTheWhole) {
  EXPECT_EQ(HmacSha256("key", {"hello ", "world"}), HmacSha256("key", {"hello world"}));
  EXPECT_NE(HmacSha256("key", {"hello world"}), HmacSha256("kez", {"hello world"}));
}

TEST(OpcuaSecurity, SignaturesAndOaepRoundTripUnderEachPolicy) {
  EvpKey key = RsaKey(2048);
  ASSERT_TRUE(key);
  for (const auto& name : {"Basic256Sha256", "Aes256_Sha256_RsaPss"}) {
    const Policy& p = *FindPolicy(name);
    std::string sig;
    ASSERT_TRUE(Sign(p, key.get(), "certificate and nonce", &sig).ok());
    EXPECT_EQ(sig.size(), 256u);
    EXPECT_TRUE(Verify(p, key.get(), "certificate and nonce", sig)) << name;
    EXPECT_FALSE(Verify(p, key.get(), "certificate and nonce!", sig)) << name;
    // A message of several OAEP blocks.
    const std::string plain(PlainBlockBytes(p, key.get()) * 2 + 7, 'x');
    std::string cipher, back;
    ASSERT_TRUE(Encrypt(p, key.get(), plain, &cipher).ok());
    EXPECT_EQ(cipher.size(), 3 * 256u);
    ASSERT_TRUE(Decrypt(p, key.get(), cipher, &back).ok());
    EXPECT_EQ(back, plain);
    EXPECT_FALSE(Decrypt(p, key.get(), cipher.substr(1), &back).ok());
  }
  // PKCS#1 v1.5 and PSS do not verify each other's signatures.
  std::string sig;
  ASSERT_TRUE(Sign(*FindPolicy("Basic256Sha256"), key.get(), "x", &sig).ok());
  EXPECT_FALSE(Verify(*FindPolicy("Aes256_Sha256_RsaPss"), key.get(), "x", sig));
  // OAEP with SHA-1 holds 214 bytes a 2048-bit block, with SHA-256 190.
  EXPECT_EQ(PlainBlockBytes(*FindPolicy("Basic256Sha256"), key.get()), 214u);
  EXPECT_EQ(PlainBlockBytes(*FindPolicy("Aes256_Sha256_RsaPss"), key.get()), 190u);
}

TEST(OpcuaSecurity, FilesThatAreNotAnIdentityAreNamed) {
  Identity id;
  Status st = LoadIdentity("/nonexistent/cert.pem", "/nonexistent/key.pem", &id);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/nonexistent/cert.pem"), std::string::npos) << st.message();
  std::string why;
  EXPECT_FALSE(TrustCertificate("not a certificate", "/nonexistent/ca.pem", &why));
  EXPECT_NE(why.find("/nonexistent/ca.pem"), std::string::npos) << why;
}

}  // namespace
}  // namespace kayak::opcua
