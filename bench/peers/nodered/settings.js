// Node-RED's settings for bench/http_ingest.sh: the flow of flows.json on
// 127.0.0.1 at $NODERED_PORT, no editor, warnings only, its user directory
// at $NODERED_DIR (the output file goes there).
module.exports = {
  uiHost: "127.0.0.1",
  uiPort: Number(process.env.NODERED_PORT),
  userDir: process.env.NODERED_DIR,
  flowFile: __dirname + "/flows.json",
  httpAdminRoot: false,
  credentialSecret: false,
  logging: { console: { level: "warn", metrics: false, audit: false } },
};
