// Preloaded with `node --require` (tests only): a server that listens on a bare port
// (`app.listen(PORT)`, as @modelcontextprotocol/server-everything does) binds 127.0.0.1
// instead of every interface, so a test's upstream is reachable from loopback only.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const bare = (typeof args[0] === "number" || typeof args[0] === "string") &&
    (args.length === 1 || typeof args[1] === "function");
  if (bare) args.splice(1, 0, "127.0.0.1");
  return listen.apply(this, args);
};
