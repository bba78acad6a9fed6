"""The Lua scripts behind ``RedisStore``: each compound operation runs atomically in Redis.

Time inside the scripts is Redis ``TIME``: one clock for every replica, so buckets refill and
breakers reopen by the same time wherever the request landed (replicas' monotonic clocks are
not comparable, and their wall clocks may be skewed).  Numbers go back as strings because Redis
turns Lua numbers into integers.
"""

from __future__ import annotations

__all__ = ["BREAKER_OPEN", "BREAKER_REPORT", "SPEND", "TAKE"]

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# KEYS: one hash per bucket.  ARGV[1]: '1' to force; then rate, capacity, amount per bucket.
TAKE = (
    _NOW
    + """
local n = #KEYS
local levels, wait, worst = {}, 0, -1
for i = 1, n do
  local rate = tonumber(ARGV[3 * i - 1])
  local cap = tonumber(ARGV[3 * i])
  local amount = tonumber(ARGV[3 * i + 1])
  local state = redis.call('HMGET', KEYS[i], 'l', 't')
  local level = cap
  if state[1] then
    level = tonumber(state[1])
    local stamp = tonumber(state[2])
    if now > stamp then level = math.min(cap, level + (now - stamp) * rate) end
  end
  levels[i] = level
  local need = math.min(amount, cap) - level
  if need > 0 and need / rate > wait then
    wait = need / rate
    worst = i - 1
  end
end
if worst >= 0 and ARGV[1] ~= '1' then return {tostring(wait), worst} end
for i = 1, n do
  local rate = tonumber(ARGV[3 * i - 1])
  local cap = tonumber(ARGV[3 * i])
  local level = math.min(cap, levels[i] - tonumber(ARGV[3 * i + 1]))
  redis.call('HSET', KEYS[i], 'l', string.format('%.17g', level), 't', string.format('%.17g', now))
  -- once the bucket would be full again its state says nothing: let it expire
  redis.call('PEXPIRE', KEYS[i], math.ceil((cap - level) / rate * 1000) + 1000)
end
return {'0', -1}
"""
)

# KEYS: the counters, then the idempotency key when ARGV[2] == '1'.
# ARGV[1]: amount; ARGV[2]: '1' with an idempotency key; ARGV[3..]: TTL in ms per key.
SPEND = """
local n = #KEYS
local counters = n
if ARGV[2] == '1' then counters = n - 1 end
local out = {}
if ARGV[2] == '1' and not redis.call('SET', KEYS[n], '1', 'NX', 'PX', ARGV[2 + n]) then
  for i = 1, counters do out[i] = redis.call('GET', KEYS[i]) or '0' end
  return out
end
for i = 1, counters do
  out[i] = redis.call('INCRBYFLOAT', KEYS[i], ARGV[1])
  redis.call('PEXPIRE', KEYS[i], ARGV[2 + i])
end
return out
"""

# KEYS[1]: the window hash (fields '<bucket>:s' and '<bucket>:f'); KEYS[2]: the open-until key.
# ARGV: successes, failures, window_s, buckets, min_requests, error_rate, open_s.
BREAKER_REPORT = (
    _NOW
    + """
local opened = redis.call('GET', KEYS[2])
if opened and tonumber(opened) > now then return tostring(tonumber(opened) - now) end
local window, nb = tonumber(ARGV[3]), tonumber(ARGV[4])
local idx = math.floor(now / (window / nb))
if tonumber(ARGV[1]) > 0 then redis.call('HINCRBY', KEYS[1], idx .. ':s', ARGV[1]) end
if tonumber(ARGV[2]) > 0 then redis.call('HINCRBY', KEYS[1], idx .. ':f', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], math.ceil(window * 2000))
local all = redis.call('HGETALL', KEYS[1])
local ok, bad = 0, 0
for i = 1, #all, 2 do
  local sep = string.find(all[i], ':')
  local b = tonumber(string.sub(all[i], 1, sep - 1))
  if b <= idx - nb then
    redis.call('HDEL', KEYS[1], all[i])
  elseif string.sub(all[i], sep + 1) == 's' then
    ok = ok + tonumber(all[i + 1])
  else
    bad = bad + tonumber(all[i + 1])
  end
end
if ok + bad >= tonumber(ARGV[5]) and bad / (ok + bad) >= tonumber(ARGV[6]) then
  local open_s = tonumber(ARGV[7])
  redis.call('SET', KEYS[2], string.format('%.17g', now + open_s), 'PX', math.ceil(open_s * 1000))
  redis.call('DEL', KEYS[1])
  return tostring(open_s)
end
return '0'
"""
)

# KEYS[1]: the window hash; KEYS[2]: the open-until key.  ARGV[1]: open_s.
BREAKER_OPEN = (
    _NOW
    + """
local open_s = tonumber(ARGV[1])
redis.call('SET', KEYS[2], string.format('%.17g', now + open_s), 'PX', math.ceil(open_s * 1000))
redis.call('DEL', KEYS[1])
return 1
"""
)
