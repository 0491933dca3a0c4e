"""The redis connector in the conformance kit: how the kit writes into its source
and reads back its sink (tests/connectors/test_conformance.py finds this file by its
place, src/connectors/<name>/kit.py, and takes its INPUTS and OUTPUTS)."""
import json
import os

from test_conformance import CANARY, Connector, Subscribed, servers


class RedisConnector(Connector):
    """A redis stream read by a consumer group, acknowledged after the
    checkpoint (rewindable); the output XADDs into another stream."""
    name = "redis"
    has_output = True
    has_server = True
    proxied = True
    made = 0

    def __init__(self, t):
        super().__init__(t)
        RedisConnector.made += 1
        self.key = f"kit{os.getpid()}r{RedisConnector.made}"
        self.proxy = servers.Proxy("127.0.0.1", servers.port_of(servers.redis_url()))
        self.url = f"redis://127.0.0.1:{self.proxy.port}"
        self.users = []

    credentials = True

    def use_credential(self, which):
        # Two ACL users with every right; the canary is a password the server
        # refuses (WRONGPASS: a run with errors).
        user = f"{self.key}u{'c' if which == CANARY else which}"
        if user not in self.users:
            servers.redis_commands([["ACL", "SETUSER", user, "on", f">pw{which}", "~*", "&*",
                                     "+@all"]])
            self.users.append(user)
        password = CANARY if which == CANARY else f"pw{which}"
        self.url = f"redis://{user}:{password}@127.0.0.1:{self.proxy.port}"

    refusals = True

    def refuse(self, on):
        # every command refused to the user (NOPERM) while on
        servers.redis_commands([["ACL", "SETUSER", self.users[0], "-@all" if on else "+@all"]])

    def input_yaml(self):
        return (f"{{redis: {{url: '{self.url}', stream: {self.key}.in, batch_size: 16, "
                f"non_json: error}}}}")

    def write(self, s, msgs):
        if msgs:
            servers.redis_commands([["XADD", f"{self.key}.in", "*", "payload", json.dumps(m)]
                                    for m in msgs])

    def write_bad(self, s):
        servers.redis_commands([["XADD", f"{self.key}.in", "*", "payload", "not json"]])

    def bad_input_option(self):
        return f"{{redis: {{url: '{self.url}', stream: s, batch_size: 0}}}}", "0"

    def tls(self, side):
        """The same server through its TLS port (server.sh: a throwaway CA),
        with the same user: the url and the tls block."""
        e = servers.env("redis")
        tls_port = servers.port_of(e["REDIS_TLS_URL"])
        url = self.url.replace("redis://", "rediss://").replace(
            f"127.0.0.1:{self.proxy.port}", f"localhost:{tls_port}")
        return {"url": url, "tls": {"ca_file": os.path.join(e["REDIS_TLS_DIR"], "ca.crt")}}

    def tuning(self, side):
        if side == "input":  # a new consumer name claims the old one's pending entries
            return {**self.tls(side), "consumer": f"{self.key}c2", "batch_size": 12}
        return self.tls(side)

    def identity_change(self):
        return {"group": f"{self.key}g2"}

    def output_yaml(self):
        return f"{{redis: {{url: '{self.url}', stream: {self.key}.out}}}}"

    def read_sink(self):
        return [json.loads(p) for p in servers.redis_stream_payloads(f"{self.key}.out")]

    def bad_output_option(self):
        return f"{{redis: {{url: '{self.url}', stream: s, maxlen: -1}}}}", "-1"

    def close(self):
        self.proxy.close()
        servers.redis_commands([["DEL", f"{self.key}.in", f"{self.key}.out"]] +
                               [["ACL", "DELUSER", u] for u in self.users])


class RedisPubSubConnector(Subscribed, RedisConnector):
    """A redis pub/sub channel: nothing is kept for an absent subscriber."""
    name = "redis_pubsub"
    delivery = "none"
    has_output = False
    refusals = False  # a subscribed connection sends no command to refuse

    def input_yaml(self):
        return (f"{{redis: {{url: '{self.url}', channel: {self.key}.ch, batch_size: 16, "
                f"non_json: error}}}}")

    def subscribed(self, s):
        return servers.redis_commands([["PUBSUB", "NUMSUB", f"{self.key}.ch"]])[0][1] >= 1

    def write(self, s, msgs):
        self.ensure_subscribed(s)
        if msgs:
            servers.redis_commands([["PUBLISH", f"{self.key}.ch", json.dumps(m)] for m in msgs])

    def write_bad(self, s):
        self.ensure_subscribed(s)
        servers.redis_commands([["PUBLISH", f"{self.key}.ch", "not json"]])

    def bad_input_option(self):
        return f"{{redis: {{url: '{self.url}', channel: c, stream: s}}}}", "stream: s"

    tuning_exempt = {"input": {"consumer": "only with `stream`: a channel has no consumer "
                                           "group"}}

    def tuning(self, side):
        return {**self.tls(side), "batch_size": 12}

    def identity_change(self):
        return None


INPUTS = [RedisConnector, RedisPubSubConnector]
OUTPUTS = [RedisConnector]
