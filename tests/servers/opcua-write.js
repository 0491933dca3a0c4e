// Writes values into the test server's variables with node-opcua's client:
// the source of the conformance kit's opcua connector.
//
//   node opcua-write.js ENDPOINT_URL [GAP_MS]
//
// Reads lines from stdin, each a JSON array of [nodeId, UInt32 value] pairs,
// writes them one after another (each waits for the server's answer), then
// prints "ok" (or "error <what>") on its own line. Two writes to the same
// variable are at least GAP_MS apart (default 200): node-opcua samples a
// variable (every 50 ms at the fastest), so changes closer than a sampling
// interval would reach a subscriber as one.
const readline = require("readline");
const { OPCUAClient, AttributeIds, DataType, MessageSecurityMode, SecurityPolicy } =
  require("node-opcua");

(async () => {
  const client = OPCUAClient.create({ endpointMustExist: false,
    securityMode: MessageSecurityMode.None, securityPolicy: SecurityPolicy.None,
    connectionStrategy: { maxRetry: 3, initialDelay: 200 } });
  const gapMs = parseInt(process.argv[3] || "200", 10);
  const last = new Map();  // node -> when it was last written
  await client.connect(process.argv[2]);
  const session = await client.createSession();
  console.log("ready");
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (!line.trim()) continue;
    try {
      for (const [nodeId, value] of JSON.parse(line)) {
        const wait = (last.get(nodeId) || 0) + gapMs - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        last.set(nodeId, Date.now());
        const status = await session.write({ nodeId, attributeId: AttributeIds.Value,
          value: { value: { dataType: DataType.UInt32, value } } });
        if (status.value !== 0) throw new Error(nodeId + ": " + status.name);
      }
      console.log("ok");
    } catch (e) {
      console.log("error " + e.message);
    }
  }
  await session.close();
  await client.disconnect();
  process.exit(0);
})().catch((e) => { console.log("error " + e.message); process.exit(1); });
