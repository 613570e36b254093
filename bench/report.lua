-- wrk script of the comparison benchmark (bench/run.sh): prints one machine-readable line with
-- the request count, the errors and the latency percentiles wrk's own --latency table lacks
-- (p99.9), read from wrk's latency histogram in the `done` hook (microseconds).
--
-- BENCH_DELAY_MS (environment), when set above 0, makes every connection wait that long after
-- each answer before its next request: c connections then send about c * 1000 / (delay + latency)
-- requests per second, a fixed-rate load for the latency-at-1,000-requests/s figure (wrk2, which
-- does this properly, is not packaged in Debian).

local delay_ms = tonumber(os.getenv("BENCH_DELAY_MS") or "0") or 0

if delay_ms > 0 then
  function delay()
    return delay_ms
  end
end

function done(summary, latency, requests)
  io.write(string.format(
    "BENCH requests=%d duration_us=%d connect=%d read=%d write=%d status=%d timeout=%d " ..
    "p50=%d p90=%d p99=%d p999=%d max=%d mean=%.1f\n",
    summary.requests, summary.duration,
    summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.status, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
