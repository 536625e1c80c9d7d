-- wrk script for `make bench` (bench/run_bench.py).
--
-- Usage: wrk ... -s profile.lua <url> -- <spec file>
--
-- The spec file has one tab-separated directive per line:
--   header <TAB> Name <TAB> value       added to every request
--   lsn <TAB> 0/3000060                  initial value of {LSN} in paths
--   lsnfile <TAB> /path                  re-read every `refresh` requests;
--                                        its first line replaces {LSN}
--   refresh <TAB> 100
--   req <TAB> weight <TAB> /path?x={LSN} one request of the mix
--
-- Requests of a mix are interleaved deterministically (smooth weighted
-- round-robin), so the proportions are exact over every cycle.  A spec with
-- a single request and no lsnfile leaves wrk's static-request fast path on.
-- done() prints one line `BENCH {json}` with the summary and latency
-- percentiles (microseconds) for run_bench.py to parse.

local templates = {}   -- template paths, with {LSN}
local reqs = {}        -- formatted request per template
local seq = {}         -- cycle of template indexes
local nseq = 0
local headers = {}
local lsn = "0/0"
local lsnfile = nil
local refresh = 100
local n = 0

local function format_all()
   for i, t in ipairs(templates) do
      local path = string.gsub(t, "{LSN}", lsn)
      local h = {}
      for k, v in pairs(headers) do h[k] = v end
      reqs[i] = wrk.format("GET", path, h)
   end
end

local function read_lsn()
   local f = io.open(lsnfile, "r")
   if f then
      local s = f:read("*l")
      f:close()
      if s and s ~= "" and s ~= lsn then
         lsn = s
         return true
      end
   end
   return false
end

function init(args)
   local spec = args[1]
   local weights = {}
   for line in io.lines(spec) do
      local f = {}
      for field in string.gmatch(line, "[^\t]+") do f[#f + 1] = field end
      if f[1] == "header" then
         headers[f[2]] = f[3]
      elseif f[1] == "lsn" then
         lsn = f[2]
      elseif f[1] == "lsnfile" then
         lsnfile = f[2]
      elseif f[1] == "refresh" then
         refresh = tonumber(f[2])
      elseif f[1] == "req" then
         weights[#weights + 1] = tonumber(f[2])
         templates[#templates + 1] = f[3]
      end
   end
   if lsnfile then read_lsn() end
   -- smooth weighted round-robin
   local total, cur = 0, {}
   for i, w in ipairs(weights) do total = total + w; cur[i] = 0 end
   for k = 1, total do
      local best = nil
      for i, w in ipairs(weights) do
         cur[i] = cur[i] + w
         if best == nil or cur[i] > cur[best] then best = i end
      end
      cur[best] = cur[best] - total
      seq[k] = best
   end
   nseq = total
   format_all()
   if #templates == 1 and not lsnfile then
      -- static request: wrk formats it once from wrk.path/wrk.headers
      wrk.path = string.gsub(templates[1], "{LSN}", lsn)
      for k, v in pairs(headers) do wrk.headers[k] = v end
      request = nil
   end
end

function request()
   n = n + 1
   if lsnfile and n % refresh == 0 and read_lsn() then format_all() end
   return reqs[seq[n % nseq + 1]]
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      'BENCH {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
      '"p50_us":%d,"p90_us":%d,"p99_us":%d,"p999_us":%d,"max_us":%d,"mean_us":%.1f}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9), latency.max, latency.mean))
end
