// Secrets out of error texts and log lines; the identity part of an address.
#include "common/redact.h"

#include <gtest/gtest.h>

namespace kayak {
namespace {

TEST(Redact, AUrlsPasswordIsHiddenRegisteredOrNot) {
  EXPECT_EQ(Redact("connect nats://kit:hunter2@127.0.0.1:4222 failed"),
            "connect nats://kit:***@127.0.0.1:4222 failed");
  EXPECT_EQ(Redact("redis://:pw1@h:6379/0 and postgresql://u:p%40ss@h/db"),
            "redis://:***@h:6379/0 and postgresql://u:***@h/db");
  // A user alone, an @ in the path, no authority: nothing to hide.
  EXPECT_EQ(Redact("nats://kit@h:4222"), "nats://kit@h:4222");
  EXPECT_EQ(Redact("http://h/a@b"), "http://h/a@b");
  EXPECT_EQ(Redact("no url here"), "no url here");
}

TEST(Redact, RegisteredSecretsAndTheirPiecesAreHidden) {
  RegisterSecret("s3cr3t-access-canary");
  EXPECT_EQ(Redact("SignatureDoesNotMatch for s3cr3t-access-canary."),
            "SignatureDoesNotMatch for ***.");
  // A URL's password, also percent-decoded (a library may echo either).
  RegisterSecret("postgresql://kit:pa%2Fss-canary@127.0.0.1:5432/db");
  EXPECT_EQ(Redact("password pa/ss-canary refused"), "password *** refused");
  // A keyword string whose password holds a space, unquoted: libpq reads the
  // second word as a keyword and quotes it in its error.
  RegisterSecret("host=127.0.0.1 password=first second-canary dbname=kit");
  EXPECT_EQ(Redact("missing \"=\" after \"second-canary\" in connection info string"),
            "missing \"=\" after \"***\" in connection info string");
  EXPECT_EQ(Redact("first second-canary"), "***");
  EXPECT_EQ(Redact("quoted: password='x y-canary'"), "quoted: password='x y-canary'");
  RegisterSecret("password='x y-canary' host=h");
  EXPECT_EQ(Redact("x y-canary"), "***");
  // Short pieces would hide ordinary words: not kept.
  RegisterSecret("abc");
  EXPECT_EQ(Redact("abc"), "abc");
}

TEST(AddressIdentity, ThePartThatNamesTheDataNotTheWayToIt) {
  EXPECT_EQ(AddressIdentity("postgresql://kit:one@127.0.0.1:5432/kit?sslmode=disable"),
            AddressIdentity("postgresql://other:two@db.internal:6432/kit"));
  EXPECT_NE(AddressIdentity("postgresql://kit@h/kit"), AddressIdentity("postgresql://kit@h/other"));
  EXPECT_EQ(AddressIdentity("host=h port=5432 user=kit password='a b' dbname=kit"), "dbname=kit");
  // TLS or not, the same system: turning TLS on keeps the state.
  EXPECT_EQ(AddressIdentity("mqtts://broker:8883"), AddressIdentity("mqtt://broker:1883"));
  EXPECT_EQ(AddressIdentity("https://h/path?q=1"), AddressIdentity("http://h:8080/path?q=1"));
  EXPECT_EQ(AddressIdentity("tls://a:4443"), AddressIdentity("nats://a:4222"));
  EXPECT_EQ(AddressIdentity("rediss://h:6380/2"), AddressIdentity("redis://h:6379/2"));
  EXPECT_NE(AddressIdentity("https://h/a"), AddressIdentity("http://h/b"));
  EXPECT_EQ(AddressIdentity("host=h password=x"), "");
  EXPECT_EQ(AddressIdentity("redis://:pw@h:6379/2"), "redis:///2");
  EXPECT_EQ(AddressIdentity("redis://h:6379"), "redis://");
  EXPECT_EQ(AddressIdentity("nats://u:p@a:4222,nats://b:4222"), "nats://");
  // A web resource is its path and query.
  EXPECT_EQ(AddressIdentity("http://u:p@h:8080/api/v1?page=all#x"), "http:///api/v1?page=all");
  EXPECT_EQ(AddressIdentity("127.0.0.1:9092,127.0.0.1:9093"), "");
}

}  // namespace
}  // namespace kayak
