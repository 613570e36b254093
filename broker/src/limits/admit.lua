-- Mint's call-limit admission (mint-broker: src/limits/redis.rs): the exact sliding windows of
-- mint_policy::limits, checked for every counter a request charges and consumed all or none.
--
-- KEYS[i]   a counter: a sorted set of admissions, each scored with its time in microseconds of
--           this server's clock (TIME is the only clock: brokers' clocks may differ).
-- ARGV[1]   the request id: the member of its first unit; its further units (a batch of calls
--           charging one counter n times) are `ID#2` .. `ID#n`. A refund removes exactly these.
-- ARGV[3i-1], ARGV[3i], ARGV[3i+1]
--           counter i's max, window in milliseconds, and the units this request needs.
--
-- Returns {1, now} when admitted; {0, wait, i, ...} when counter(s) i are spent, wait being the
-- microseconds until the request would fit (nothing consumed); {-1} when one of the request's
-- members is there already (request ids repeated: nothing consumed).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local id = ARGV[1]

local function member(unit)
  if unit == 1 then
    return id
  end
  return id .. '#' .. unit
end

local refused = {0, 0}
for i = 1, #KEYS do
  local max = tonumber(ARGV[3 * i - 1])
  local per = tonumber(ARGV[3 * i]) * 1000
  local n = tonumber(ARGV[3 * i + 1])
  -- The window is (now - per, now]: an admission leaves it exactly `per` after it was made.
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', string.format('%d', now - per))
  local len = redis.call('ZCARD', KEYS[i])
  if len + n > max then
    -- Room for n appears when the admission len + n - 1 - max (from the oldest, 0-based) leaves;
    -- a reload that lowered max can leave more than max inside. A need larger than max never
    -- fits: wait a whole window, and still be refused.
    local leaves = now
    local index = len + n - max - 1
    if index < len then
      leaves = tonumber(redis.call('ZRANGE', KEYS[i], index, index, 'WITHSCORES')[2])
    end
    local wait = leaves + per - now
    if n > max and wait < per then
      wait = per
    end
    if wait > refused[2] then
      refused[2] = wait
    end
    refused[#refused + 1] = i
  end
end
if #refused > 2 then
  return refused
end

local score = string.format('%d', now)
for i = 1, #KEYS do
  local n = tonumber(ARGV[3 * i + 1])
  for unit = 1, n do
    if redis.call('ZADD', KEYS[i], 'NX', score, member(unit)) == 0 then
      -- Undo this request's units added so far, and refuse.
      for j = 1, i do
        local added = tonumber(ARGV[3 * j + 1])
        if j == i then
          added = unit - 1
        end
        for u = 1, added do
          redis.call('ZREM', KEYS[j], member(u))
        end
      end
      return {-1}
    end
  end
  -- The counter lives one window after its last admission, when every entry has left it.
  redis.call('PEXPIRE', KEYS[i], ARGV[3 * i])
end
return {1, now}
