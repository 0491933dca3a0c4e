-- wrk script: POSTs a small JSON message (about 120 bytes) with a changing id.
local counter = 0
request = function()
  counter = counter + 1
  local body = string.format(
    '{"id":%d,"user":"u%d","event":"click","page":"/products/%d","ms":%d,"ok":true}',
    counter, counter % 1000, counter % 97, counter * 7)
  return wrk.format("POST", "/ingest", {["Content-Type"] = "application/json"}, body)
end
