// The OPC UA server of the opcua input's tests and benchmark (node-opcua,
// pinned in tests/servers/npm). Binds 127.0.0.1 only.
//
//   node opcua-server.js PORT PKI_DIR [--items N [--bench-ms M]] [--secure-only] [--token-ms N]
//                        [--trust CERT]... [--trust-user CERT]... [--cert CERT --key KEY]
//
// Namespace 1, under Objects/Plant, changing every 100 ms from one timer:
//   Plant.Counter (UInt32, +1), Plant.Level (Int32, -Counter),
//   Plant.Temperature (Double), Plant.Status (String)
// Under Objects/Types, fixed values of the built-in types the input decodes:
//   Types.Boolean, .SByte, .Int16, .UInt64, .Int64, .Float, .String (unicode),
//   .DateTime, .Guid, .ByteString, .LocalizedText, .QualifiedName, .NodeId,
//   .StatusCode, .Int32Array, .StringArray, .Null
// Under Objects/Kit, Kit.k0 .. Kit.k3 (UInt32), written by clients only.
// --items N: Bench.V0 .. Bench.V<N-1> (Double), each changed every 100 ms
// (--bench-ms M: every M ms instead).
// Endpoints: None, and Basic256Sha256, Aes128_Sha256_RsaOaep and
// Aes256_Sha256_RsaPss each with Sign and SignAndEncrypt. The server's
// certificate (self-signed, made on the first start, or --cert with --key,
// PEM) is written to PKI_DIR/server.pem.
// --secure-only: only Basic256Sha256 SignAndEncrypt endpoints (no None).
// --trust CERT (PEM, repeatable): only these client certificates are taken
// (without it, any client certificate is).
// --trust-user CERT (PEM, repeatable): user certificates it takes as logins
// (without it, none).
// --token-ms N: a secure channel's token lasts at most N ms (the client must
// renew it; node-opcua closes a channel whose token ran out).
// Logins: anonymous, or user "kayak" with password "kayak-pass".
// Prints "OPCUA_READY <endpoint url>" once it listens.
const fs = require("fs");
const path = require("path");
const { X509Certificate } = require("crypto");
const { OPCUAServer, Variant, DataType, OPCUACertificateManager, MessageSecurityMode,
        SecurityPolicy, StatusCodes, coerceLocalizedText, coerceQualifiedName,
        coerceNodeId } = require("node-opcua");

const args = process.argv.slice(2);
const port = parseInt(args[0] || "4840", 10);
const pkiDir = args[1] || "/tmp/kayak-opcua-pki";
const flag = (name) => args.indexOf(name);
const items = flag("--items") >= 0 ? parseInt(args[flag("--items") + 1], 10) : 0;
const benchMs = flag("--bench-ms") >= 0 ? parseInt(args[flag("--bench-ms") + 1], 10) : 100;
const secureOnly = flag("--secure-only") >= 0;
const tokenMs = flag("--token-ms") >= 0 ? parseInt(args[flag("--token-ms") + 1], 10) : 600000;
const many = (name) => args.flatMap((a, i) => (a === name ? [args[i + 1]] : []));
const trusted = many("--trust");
const trustedUsers = many("--trust-user");
const option = (name) => (flag(name) >= 0 ? args[flag(name) + 1] : undefined);
const der = (file) => new X509Certificate(fs.readFileSync(file)).raw;

(async () => {
  const serverCertificateManager = new OPCUACertificateManager({
    automaticallyAcceptUnknownCertificate: trusted.length === 0, rootFolder: pkiDir });
  await serverCertificateManager.initialize();
  for (const f of trusted) await serverCertificateManager.trustCertificate(der(f));
  const userCertificateManager = new OPCUACertificateManager({
    automaticallyAcceptUnknownCertificate: false, rootFolder: path.join(pkiDir, "user") });
  await userCertificateManager.initialize();
  for (const f of trustedUsers) await userCertificateManager.trustCertificate(der(f));
  const server = new OPCUAServer({
    port, host: "127.0.0.1", hostname: "127.0.0.1", resourcePath: "/UA/kayak",
    serverCertificateManager, userCertificateManager,
    certificateFile: option("--cert"), privateKeyFile: option("--key"),
    securityModes: secureOnly ? [MessageSecurityMode.SignAndEncrypt]
                              : [MessageSecurityMode.None, MessageSecurityMode.Sign,
                                 MessageSecurityMode.SignAndEncrypt],
    securityPolicies: secureOnly ? [SecurityPolicy.Basic256Sha256]
                                 : [SecurityPolicy.None, SecurityPolicy.Basic256Sha256,
                                    SecurityPolicy.Aes128_Sha256_RsaOaep,
                                    SecurityPolicy.Aes256_Sha256_RsaPss],
    allowAnonymous: true,
    userManager: { isValidUser: (user, password) => user === "kayak" && password === "kayak-pass" },
    maxConnectionsPerEndpoint: 100,
    defaultSecureTokenLifetime: tokenMs,
    serverCapabilities: { maxSessions: 100,
      operationLimits: { maxMonitoredItemsPerCall: 100000 } },
  });
  await server.initialize();
  const ns = server.engine.addressSpace.getOwnNamespace();
  const objects = server.engine.addressSpace.rootFolder.objects;
  const folder = (name) => ns.addObject({ organizedBy: objects, browseName: name });
  const variable = (parent, name, dataType, value, valueRank) => ns.addVariable({
    componentOf: parent, browseName: name, nodeId: "s=" + parent.browseName.name + "." + name,
    dataType, valueRank: valueRank === undefined ? -1 : valueRank, minimumSamplingInterval: 10,
    value: new Variant({ dataType: DataType[dataType], value,
                         arrayType: valueRank === 1 ? 1 : 0 }) });

  const plant = folder("Plant");
  const counter = variable(plant, "Counter", "UInt32", 0);
  const level = variable(plant, "Level", "Int32", 0);
  const temperature = variable(plant, "Temperature", "Double", 20);
  const status = variable(plant, "Status", "String", "IDLE");

  const types = folder("Types");
  variable(types, "Boolean", "Boolean", true);
  variable(types, "SByte", "SByte", -5);
  variable(types, "Int16", "Int16", -12345);
  variable(types, "UInt64", "UInt64", [0xffffffff, 0xffffffff]);  // 2^64 - 1 as [high, low]
  variable(types, "Int64", "Int64", [0xfffffffe, 0x00000001]);    // -8589934591
  variable(types, "Float", "Float", 1.5);
  variable(types, "String", "String", "Grüße \u2603 \"quoted\"");
  variable(types, "DateTime", "DateTime", new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 678)));
  variable(types, "Guid", "Guid", "72962B91-FA75-4AE6-8D28-B404DC7DAF63");
  variable(types, "ByteString", "ByteString", Buffer.from([0, 1, 2, 250, 255]));
  variable(types, "LocalizedText", "LocalizedText", coerceLocalizedText({ locale: "en", text: "Pump 1" }));
  variable(types, "QualifiedName", "QualifiedName", coerceQualifiedName("1:Valve"));
  variable(types, "NodeId", "NodeId", coerceNodeId("ns=1;s=Plant.Counter"));
  variable(types, "StatusCode", "StatusCode", StatusCodes.BadDeviceFailure);
  variable(types, "Int32Array", "Int32", [1, -2, 3], 1);
  variable(types, "StringArray", "String", ["a", "b"], 1);
  variable(types, "Null", "Double", null);

  // Writable by a client (tests/servers/opcua-write.js): the conformance kit's source.
  const kit = folder("Kit");
  for (let i = 0; i < 4; i++) {
    ns.addVariable({ componentOf: kit, browseName: "k" + i, nodeId: "s=Kit.k" + i,
      dataType: "UInt32", minimumSamplingInterval: 0,
      accessLevel: "CurrentRead | CurrentWrite", userAccessLevel: "CurrentRead | CurrentWrite",
      value: new Variant({ dataType: DataType.UInt32, value: 0 }) });
  }

  const bench = [];
  if (items > 0) {
    const b = folder("Bench");
    for (let i = 0; i < items; i++) bench.push(variable(b, "V" + i, "Double", 0));
  }

  let n = 0;
  const t0 = Date.now();
  const timer = setInterval(() => {
    n++;
    const now = new Date();
    const set = (v, dataType, value) =>
      v.setValueFromSource(new Variant({ dataType, value }), StatusCodes.Good, now);
    set(counter, DataType.UInt32, n);
    set(level, DataType.Int32, -n);
    set(temperature, DataType.Double, 20 + 5 * Math.sin((Date.now() - t0) / 1000));
    set(status, DataType.String, ["IDLE", "RUNNING", "STOPPED"][Math.floor(n / 10) % 3]);
  }, 100);
  let tick = 0;
  const benchTimer = setInterval(() => {
    tick++;
    const now = new Date();
    for (let i = 0; i < bench.length; i++) {
      bench[i].setValueFromSource(new Variant({ dataType: DataType.Double, value: tick + i / 1000 }),
                                  StatusCodes.Good, now);
    }
  }, benchMs);

  await server.start();
  const cert = new X509Certificate(server.getCertificate());
  fs.writeFileSync(path.join(pkiDir, "server.pem"), cert.toString());
  console.log("OPCUA_READY " + server.getEndpointUrl());
  const stop = async () => { clearInterval(timer); clearInterval(benchTimer); await server.shutdown(100); process.exit(0); };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
})().catch((e) => { console.error("OPCUA_FAIL", e); process.exit(1); });
