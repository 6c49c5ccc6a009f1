// A receiver of Countersign's signed webhooks, in Node.js (18 or newer) with nothing but its
// standard library.
//
// Countersign signs every webhook it sends with Standard Webhooks: a notification channel of
// kind "webhook" (interaction.opened, .decided, ...) with the channel's secret, an A2A push
// config's deliveries with the tenant's push secret. Check the signature before you trust a
// body:
//
//     WEBHOOK_SECRET='whsec_...' node webhook-receiver.mjs 8080
//
// It answers 204 to a delivery whose signature holds and whose timestamp is within five
// minutes of now, and prints its event as one JSON line; anything else gets 401. A delivery is
// sent again, with the same webhook-id, when an answer is lost: the second copy is answered
// 204 and not handled twice.
import { createHmac, timingSafeEqual } from "node:crypto";
import { createServer } from "node:http";

const TOLERANCE_SECONDS = 5 * 60;

function verify(secret, headers, body) {
  const id = headers["webhook-id"] ?? "";
  const timestamp = headers["webhook-timestamp"] ?? "";
  const signatures = headers["webhook-signature"] ?? "";
  if (!id || !/^\d+$/.test(timestamp) || !signatures) {
    throw new Error("the webhook-id, webhook-timestamp and webhook-signature headers");
  }
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > TOLERANCE_SECONDS) {
    throw new Error("a timestamp more than five minutes from now (a replay?)");
  }
  const key = Buffer.from(secret.replace(/^whsec_/, ""), "base64");
  const expected = createHmac("sha256", key)
    .update(Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]))
    .digest();
  // During a secret's rotation a delivery carries a signature for each secret, space-separated.
  for (const signature of signatures.split(" ")) {
    const [version, value] = signature.split(",", 2);
    const given = Buffer.from(value ?? "", "base64");
    if (version === "v1" && given.length === expected.length && timingSafeEqual(given, expected)) {
      return JSON.parse(body.toString("utf8"));
    }
  }
  throw new Error("no signature matches this body");
}

const secret = process.env.WEBHOOK_SECRET ?? "";
const seen = new Set();

const server = createServer((request, response) => {
  const chunks = [];
  request.on("data", (chunk) => chunks.push(chunk));
  request.on("end", () => {
    let event;
    try {
      event = verify(secret, request.headers, Buffer.concat(chunks));
    } catch (refused) {
      console.error(`refused: ${refused.message}`);
      response.writeHead(401).end();
      return;
    }
    const id = request.headers["webhook-id"];
    if (!seen.has(id)) {
      seen.add(id);
      console.log(JSON.stringify({ id, event }));
    }
    response.writeHead(204).end();
  });
});

if (!secret.startsWith("whsec_")) {
  console.error("set WEBHOOK_SECRET to the whsec_... secret Countersign showed you");
  process.exit(1);
}
const host = process.env.HOST ?? "127.0.0.1";
server.listen(Number(process.argv[2] ?? 8080), host, () => {
  console.error(`listening on http://${host}:${server.address().port}/`);
});
