-- bench/pipeline.lua: HTTP/1.1 pipelining for wrk.
--
--   wrk -s bench/pipeline.lua http://127.0.0.1:18080/100.txt [-- DEPTH]
--
-- Each write carries DEPTH (default 16) GET requests for the URL's path,
-- concatenated. wrk parses the responses one by one, so "requests" and
-- "Requests/sec" in its report count responses, not writes.

local depth = 16
local req

init = function(args)
   if args[1] then
      depth = tonumber(args[1])
   end
   local r = {}
   for i = 1, depth do
      r[i] = wrk.format(nil, wrk.path)
   end
   req = table.concat(r)
end

request = function()
   return req
end
