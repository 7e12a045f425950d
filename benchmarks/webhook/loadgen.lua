-- wrk script: POST the AdmissionReviews in BODY_FILE, one JSON document per line; with more
-- than one, in turn, so that each request is a different pod. Print one JSON summary line at
-- the end.
local bodies = {}
for line in io.lines(os.getenv("BODY_FILE")) do
  bodies[#bodies + 1] = line
end
assert(#bodies > 0, "BODY_FILE holds no AdmissionReview")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

if #bodies == 1 then
  wrk.body = bodies[1]  -- one request, built once: the client's cost stays off the figures
else
  local next_body = 0
  request = function()
    next_body = next_body % #bodies + 1
    return wrk.format(nil, nil, nil, bodies[next_body])
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"socket_errors":%d,"non2xx":%d,"p50_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99)))
end
