// Preloaded with `node -r` by modu-mcp's tests: forces every `listen(port)` onto 127.0.0.1.
// server-everything has no host option and would otherwise listen on every interface.
"use strict";
const net = require("net");
const originalListen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  if (typeof first === "number" || (typeof first === "string" && /^\d+$/.test(first))) {
    const callback = args.find((a) => typeof a === "function");
    return originalListen.call(this, { port: Number(first), host: "127.0.0.1" }, callback);
  }
  if (first && typeof first === "object" && !Array.isArray(first) && "port" in first) {
    args[0] = Object.assign({}, first, { host: "127.0.0.1" });
  }
  return originalListen.apply(this, args);
};
