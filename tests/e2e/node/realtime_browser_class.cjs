// OpenAI's Realtime browser class, the `openai` SDK's OpenAIRealtimeWebSocket, unmodified,
// against the server's /v1/realtime?model=...: one text response.
//
// Usage: node realtime_browser_class.cjs PORT API_KEY CERT KEY
// (NODE_PATH names the node_modules holding `openai`; Node 20 needs
// --experimental-websocket for the WebSocket the class uses, as a browser's.)
// The class builds only wss:// URLs, so the script puts TLS in front of the server
// (CERT and KEY, a certificate for 127.0.0.1 that NODE_EXTRA_CA_CERTS trusts), as a
// proxy would. It prints one JSON line: the response's text, its status and the
// subprotocol the server selected; a failure is exit 1 with its message on stderr.
"use strict";

const fs = require("node:fs");
const net = require("node:net");
const tls = require("node:tls");
const { OpenAI } = require("openai");
const { OpenAIRealtimeWebSocket } = require("openai/realtime/websocket");

async function main() {
  const [port, apiKey, cert, key] = process.argv.slice(2);
  const proxy = tls.createServer(
    { cert: fs.readFileSync(cert), key: fs.readFileSync(key) },
    (client) => {
      const upstream = net.connect(Number(port), "127.0.0.1");
      client.pipe(upstream).pipe(client);
      client.on("error", () => upstream.destroy());
      upstream.on("error", () => client.destroy());
    },
  );
  await new Promise((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  const baseURL = `https://127.0.0.1:${proxy.address().port}/v1`;
  const client = new OpenAI({ apiKey, baseURL });
  const realtime = new OpenAIRealtimeWebSocket({ model: "echo" }, client);
  let text = "";
  const done = new Promise((resolve, reject) => {
    realtime.on("error", (error) => reject(error));
    realtime.on("response.output_text.delta", (event) => {
      text += event.delta;
    });
    realtime.on("response.done", (event) => resolve(event));
  });
  realtime.socket.addEventListener("open", () => {
    realtime.send({
      type: "conversation.item.create",
      item: {
        type: "message",
        role: "user",
        content: [{ type: "input_text", text: "hello from the browser class" }],
      },
    });
    realtime.send({ type: "response.create" });
  });
  const event = await done;
  const protocol = realtime.socket.protocol;
  console.log(JSON.stringify({ text, status: event.response.status, protocol }));
  realtime.close();
  process.exit(0);
}

main().catch((error) => {
  console.error(String((error && (error.message || error.error?.message)) || error));
  process.exit(1);
});
