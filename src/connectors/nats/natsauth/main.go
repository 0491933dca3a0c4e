// natsauth writes the credentials of the nats connector's login tests into a
// directory, made with the NATS project's own nkeys and jwt libraries:
//
//	natsauth DIR
//
//	user.pub, user.nk          an nkey user: its public key and its seed file
//	other.nk                   another user's seed (a login the server refuses)
//	operator.conf              nats-server lines for operator (JWT) mode: the
//	                           operator's JWT and a memory resolver preloaded
//	                           with one account
//	user.creds                 a user of that account (JWT and seed, the
//	                           format `nsc` writes)
//	stranger.creds             a user of an account the server does not know
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

func must[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintln(os.Stderr, "natsauth:", err)
		os.Exit(1)
	}
	return v
}

func write(dir, name string, data []byte) {
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "natsauth:", err)
		os.Exit(1)
	}
}

// creds makes a user of the account `akp` signs for, as a .creds file.
func creds(akp nkeys.KeyPair, name string) []byte {
	ukp := must(nkeys.CreateUser())
	uc := jwt.NewUserClaims(must(ukp.PublicKey()))
	uc.Name = name
	return must(jwt.FormatUserConfig(must(uc.Encode(akp)), must(ukp.Seed())))
}

func account(okp nkeys.KeyPair, name string) (nkeys.KeyPair, string) {
	akp := must(nkeys.CreateAccount())
	ac := jwt.NewAccountClaims(must(akp.PublicKey()))
	ac.Name = name
	return akp, must(ac.Encode(okp))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: natsauth DIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	if err := os.MkdirAll(dir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "natsauth:", err)
		os.Exit(1)
	}

	user := must(nkeys.CreateUser())
	write(dir, "user.pub", []byte(must(user.PublicKey())+"\n"))
	write(dir, "user.nk", append(must(user.Seed()), '\n'))
	other := must(nkeys.CreateUser())
	write(dir, "other.nk", append(must(other.Seed()), '\n'))

	okp := must(nkeys.CreateOperator())
	oc := jwt.NewOperatorClaims(must(okp.PublicKey()))
	oc.Name = "kayak-test"
	ojwt := must(oc.Encode(okp))
	akp, ajwt := account(okp, "kayak")
	sys, sysjwt := account(okp, "SYS")
	conf := fmt.Sprintf("operator: %q\nsystem_account: %s\nresolver: MEMORY\n"+
		"resolver_preload: {\n  %s: %q\n  %s: %q\n}\n",
		ojwt, must(sys.PublicKey()), must(akp.PublicKey()), ajwt, must(sys.PublicKey()), sysjwt)
	write(dir, "operator.conf", []byte(conf))
	write(dir, "user.creds", creds(akp, "kayak"))
	// An account of another operator: the server knows neither.
	strangerOp := must(nkeys.CreateOperator())
	strangerAcc, _ := account(strangerOp, "elsewhere")
	write(dir, "stranger.creds", creds(strangerAcc, "stranger"))
}
