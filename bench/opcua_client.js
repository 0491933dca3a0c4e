// The ceiling of bench/opcua_ingest.py: node-opcua's own client subscribed to
// the same variables with the same settings as the kayak input, counting the
// data changes it receives.
//
//   node opcua_client.js URL ITEMS SAMPLING_MS PUBLISHING_MS QUEUE WARMUP_S SECONDS
//                        [POLICY PKI_DIR]
//
// POLICY other than None: SignAndEncrypt under it, with a certificate the
// client makes in PKI_DIR.
// Prints one JSON line: changes received in the SECONDS after WARMUP_S, and
// the process's CPU time in that window.
const { OPCUAClient, AttributeIds, TimestampsToReturn, MessageSecurityMode, SecurityPolicy,
        ClientMonitoredItemGroup, OPCUACertificateManager } = require("node-opcua");
const [url, items, sampling, publishing, queue, warmup, seconds, policy, pki] =
  process.argv.slice(2);
const secure = policy && policy !== "None";

(async () => {
  const client = OPCUAClient.create({ endpointMustExist: false,
    securityMode: secure ? MessageSecurityMode.SignAndEncrypt : MessageSecurityMode.None,
    securityPolicy: secure ? SecurityPolicy[policy] : SecurityPolicy.None,
    clientCertificateManager: secure
      ? new OPCUACertificateManager({ rootFolder: pki, automaticallyAcceptUnknownCertificate: true })
      : undefined });
  await client.connect(url);
  const session = await client.createSession();
  const sub = await session.createSubscription2({
    requestedPublishingInterval: Number(publishing), requestedMaxKeepAliveCount: 10,
    requestedLifetimeCount: 60, maxNotificationsPerPublish: 10000, publishingEnabled: true });
  const nodes = [];
  for (let i = 0; i < Number(items); i++) {
    nodes.push({ nodeId: "ns=1;s=Bench.V" + i, attributeId: AttributeIds.Value });
  }
  const group = ClientMonitoredItemGroup.create(sub, nodes,
    { samplingInterval: Number(sampling), queueSize: Number(queue), discardOldest: true },
    TimestampsToReturn.Both);
  let count = 0;
  group.on("changed", () => { count++; });
  await new Promise((r) => setTimeout(r, Number(warmup) * 1000));
  const c0 = count, cpu0 = process.cpuUsage(), t0 = process.hrtime.bigint();
  await new Promise((r) => setTimeout(r, Number(seconds) * 1000));
  const c1 = count, cpu1 = process.cpuUsage(cpu0), t1 = process.hrtime.bigint();
  console.log(JSON.stringify({ changes: c1 - c0, secs: Number(t1 - t0) / 1e9,
                               cpu_secs: (cpu1.user + cpu1.system) / 1e6 }));
  await sub.terminate();
  await session.close();
  await client.disconnect();
  process.exit(0);
})().catch((e) => { console.error("opcua_client:", e.message); process.exit(1); });
