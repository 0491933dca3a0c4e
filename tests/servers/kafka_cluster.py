#!/usr/bin/env python3
"""Real Apache Kafka brokers on loopback, in KRaft mode, for the tests and the
benchmarks: the jars of tests/servers/kafka/pom.xml (scripts/install-deps.sh
puts them in tests/servers/kafka/libs) on Debian's OpenJDK 17.

    kafka_cluster.py start DIR [--brokers N] [--tls]
        start N brokers (each also a controller of the quorum), wait until
        they serve; write DIR/env (KAFKA_BROKERS=host:port,...) and DIR/pid
        (the first broker's JVM). With --tls (one broker) it also listens
        over TLS with a throwaway CA (tests/e2e/tls_ca.py in DIR/tls):
        KAFKA_SSL_BROKERS requires a client certificate, KAFKA_SASL_BROKERS
        takes SASL PLAIN or SCRAM-SHA-256 (user kayak, KAFKA_SASL_PASSWORD)
        over TLS, KAFKA_EXPIRED_BROKERS shows an expired certificate
    kafka_cluster.py stop DIR
        stop every broker started in DIR

Imported, `Cluster` does the same and can stop and start one broker of it (a
test that kills a broker under load). Every broker binds 127.0.0.1 only; its
log and data are under DIR."""
import argparse
import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
LIBS = os.environ.get("KAYAK_KAFKA_LIBS", os.path.join(HERE, "kafka", "libs"))
JAVA = os.environ.get("KAYAK_JAVA", shutil.which("java") or "java")

# What a test broker changes from Kafka's defaults, and why: internal topics
# with one replica (a single broker can hold them) and few partitions (made
# at the first group or transaction, 50 partitions take seconds); a group's
# first join is not held 3 s for more members.
SINGLE = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}
# A cluster keeps the internal topics on every broker, like production.
CLUSTER = dict(SINGLE, **{
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
})

LOG4J = """status=error
appender.file.type=File
appender.file.name=file
appender.file.fileName={log}
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=WARN
rootLogger.appenderRef.file.ref=file
logger.started.name=kafka.server.KafkaRaftServer
logger.started.level=INFO
"""


# The SASL user's password on the TLS listeners (a test broker's, not a secret).
SASL_PASSWORD = "kayak-sasl-secret"


def free_port():
    """A port that is free now, below the kernel's ephemeral range: a broker
    takes seconds to bind it, and a port from that range (bind to 0) may meanwhile
    become the local end of any process's outgoing connection."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bind_failed(workdir):
    """Whether a broker of the cluster in workdir could not bind its port."""
    for log in glob.glob(os.path.join(workdir, "broker*", "*.log")):
        text = tail(log, 200)
        if "Address already in use" in text or "BindException" in text:
            return True
    return False


class Cluster:
    def __init__(self, workdir, brokers=1, props=None, heap_mb=None, tls=False):
        self.dir = workdir
        self.n = brokers
        self.tls = tls and brokers == 1
        self.heap = heap_mb or (768 if brokers == 1 else 512)
        self.props = dict(SINGLE if brokers == 1 else CLUSTER, **(props or {}))
        self.ports = [free_port() for _ in range(brokers)]
        self.controller_ports = [free_port() for _ in range(brokers)]
        self.procs = [None] * brokers
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in self.ports)
        self.tls_ports = {name: free_port() for name in ("SSL", "SASL_SSL", "EXPIRED")}
        self.tls_dir = os.path.join(workdir, "tls")

    def _tls_props(self):
        """The TLS listeners' settings (one broker): PEM stores, the client
        certificate required on SSL, SASL on SASL_SSL, an expired certificate
        on EXPIRED."""
        sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
        import tls_ca
        d = tls_ca.make(self.tls_dir)
        for name in ("server", "expired"):
            with open(os.path.join(d, f"{name}-keystore.pem"), "w") as out:
                for part in (f"{name}.key", f"{name}.crt"):
                    with open(os.path.join(d, part)) as f:
                        out.write(f.read())
        plain = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                 f'user_kayak="{SASL_PASSWORD}";')
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": os.path.join(d, "server-keystore.pem"),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": os.path.join(d, "ca.crt"),
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.expired.ssl.keystore.location": os.path.join(d, "expired-keystore.pem"),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain,
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        }
    def broker_dir(self, i):
        return os.path.join(self.dir, f"broker{i + 1}")

    def _configure(self, cluster_id):
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.controller_ports))
        for i in range(self.n):
            d = self.broker_dir(i)
            os.makedirs(d, exist_ok=True)
            extra = "".join(f",{n}://127.0.0.1:{p}" for n, p in self.tls_ports.items()) \
                if self.tls else ""
            props = dict(self.props, **{
                "process.roles": "broker,controller",
                "node.id": str(i + 1),
                "controller.quorum.voters": voters,
                "listeners": (f"PLAINTEXT://127.0.0.1:{self.ports[i]},"
                              f"CONTROLLER://127.0.0.1:{self.controller_ports[i]}{extra}"),
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.ports[i]}{extra}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT" + (
                    ",SSL:SSL,SASL_SSL:SASL_SSL,EXPIRED:SSL" if self.tls else ""),
                "log.dirs": os.path.join(d, "data"),
            })
            if self.tls:
                props.update(self._tls_props())
            with open(os.path.join(d, "server.properties"), "w") as f:
                f.writelines(f"{k}={v}\n" for k, v in sorted(props.items()))
            with open(os.path.join(d, "log4j2.properties"), "w") as f:
                f.write(LOG4J.format(log=os.path.join(d, "server.log")))
            scram = (["--add-scram", f"SCRAM-SHA-256=[name=kayak,password={SASL_PASSWORD}]"]
                     if self.tls else [])
            self._java(i, "kafka.tools.StorageTool", "format", "--ignore-formatted",
                       "-t", cluster_id, "-c", os.path.join(d, "server.properties"), *scram)

    def _classpath(self):
        if not glob.glob(os.path.join(LIBS, "kafka_2.13-*.jar")):
            sys.exit(f"kafka_cluster.py: no Kafka jars in {LIBS}: run scripts/install-deps.sh")
        return os.path.join(LIBS, "*")

    def _java(self, i, main, *args):
        d = self.broker_dir(i)
        r = subprocess.run([JAVA, "-Xmx256m", f"-Dlog4j2.configurationFile={d}/log4j2.properties",
                            "-cp", self._classpath(), main, *args],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{main} {' '.join(args)}: {r.stdout}{r.stderr}")

    def start(self, timeout=120):
        os.makedirs(self.dir, exist_ok=True)
        self._configure(uuid.uuid4().hex[:22])
        try:
            for i in range(self.n):
                self.start_broker(i, wait=False)
            for i in range(self.n):
                self.await_broker(i, timeout)
        except RuntimeError:
            self.close()  # none is left running
            raise
        with open(os.path.join(self.dir, "pids"), "w") as f:
            f.writelines(f"{p.pid}\n" for p in self.procs)
        return self

    def start_broker(self, i, wait=True, timeout=120):
        d = self.broker_dir(i)
        log = os.path.join(d, "server.log")
        if os.path.exists(log):
            os.rename(log, log + f".{int(time.time() * 1000)}")
        out = open(os.path.join(d, "stdout.log"), "ab")
        self.procs[i] = subprocess.Popen(
            [JAVA, f"-Xms{self.heap // 2}m", f"-Xmx{self.heap}m", "-XX:+UseG1GC",
             "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={d}/log4j2.properties",
             "-cp", self._classpath(), "kafka.Kafka", os.path.join(d, "server.properties")],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
        out.close()
        if wait:
            self.await_broker(i, timeout)

    def await_broker(self, i, timeout=120):
        """Until broker i logged that it serves (and its port takes connections)."""
        log = os.path.join(self.broker_dir(i), "server.log")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[i].poll() is not None:
                raise RuntimeError(f"kafka broker {i + 1} exited: {tail(log)}"
                                   f"{tail(os.path.join(self.broker_dir(i), 'stdout.log'))}")
            try:
                with open(log) as f:
                    started = "Kafka Server started" in f.read()
            except OSError:
                started = False
            if started:
                try:
                    socket.create_connection(("127.0.0.1", self.ports[i]), 1).close()
                    return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"kafka broker {i + 1} did not start in {timeout} s: {tail(log)}")

    def stop_broker(self, i, sig=signal.SIGTERM, timeout=60):
        p = self.procs[i]
        if p is None or p.poll() is not None:
            return
        p.send_signal(sig)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def close(self):
        for i in range(self.n):
            self.stop_broker(i, signal.SIGKILL)


def tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def stop(workdir):
    try:
        with open(os.path.join(workdir, "pids")) as f:
            pids = [int(l) for l in f if l.strip()]
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 30
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["start", "stop"])
    ap.add_argument("dir")
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--tls", action="store_true")
    a = ap.parse_args()
    if a.what == "stop":
        stop(a.dir)
        shutil.rmtree(a.dir, ignore_errors=True)
        return
    for attempt in range(3):
        stop(a.dir)  # brokers left by an interrupted run, or by the failed attempt
        shutil.rmtree(a.dir, ignore_errors=True)
        try:
            c = Cluster(a.dir, a.brokers, tls=a.tls).start()
            break
        except RuntimeError as e:
            # A port taken between its choice and the broker's bind: other ports.
            if attempt < 2 and bind_failed(a.dir):
                print(f"kafka_cluster.py: a port was taken, starting again: {e}", file=sys.stderr)
                continue
            sys.exit(f"kafka_cluster.py: {e}")
    with open(os.path.join(a.dir, "pid"), "w") as f:
        f.write(f"{c.procs[0].pid}\n")
    with open(os.path.join(a.dir, "env"), "w") as f:
        f.write(f"KAFKA_BROKERS={c.bootstrap}\n")
        if c.tls:
            for name, port in c.tls_ports.items():
                f.write(f"KAFKA_{name.replace('SASL_SSL', 'SASL')}_BROKERS=127.0.0.1:{port}\n")
            f.write(f"KAFKA_TLS_DIR={c.tls_dir}\nKAFKA_SASL_PASSWORD={SASL_PASSWORD}\n")


if __name__ == "__main__":
    main()
