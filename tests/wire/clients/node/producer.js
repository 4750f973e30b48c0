'use strict';
// An ali-ons producer driven by tests/wire (tests/wire/real_clients.py).
//
//   node producer.js '{"nameSrv": "127.0.0.1:9876", "group": "PG"}'  < messages
//
// Reads one message a line on stdin, {"topic", "tags"?, "keys"?: [..], "properties"?: {..}, "body": "text"}, sends each
// with Producer.send (one at a time, in order; a body of 4 KiB or more goes zlib-compressed, as
// ali-ons does by itself) and prints one JSON object a line on stdout (and nothing else there):
//   {"event": "ready"}                                  after producer.ready()
//   {"event": "sent", "i", "status", "msgId", "queueId", "queueOffset", "compressed", "bodySha256",
//    "bodyLength", "sentAt"}                            a send answered (sentAt: epoch ms just before it, fractional;
//                                                       bodySha256/bodyLength: of the body as given, before compression)
//   {"event": "failed", "i", "message"}                 a send that threw
//   {"event": "closed"}                                 at the end of stdin, after close() (exit code 0)
// A line that is not a message ends it with exit code 2. SIGTERM closes it as the end of stdin does.
const crypto = require('crypto');
const readline = require('readline');
const { performance } = require('perf_hooks');
const { Producer, Message } = require('ali-ons');

const opts = JSON.parse(process.argv[2] || '{}');
if (!opts.nameSrv) {
  process.stderr.write('producer.js: option nameSrv is required\n');
  process.exit(2);
}
const now = () => performance.timeOrigin + performance.now();
const num = v => (v && typeof v.toNumber === 'function' ? v.toNumber() : Number(v));
const emit = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const verbose = process.env.RMQ_CLIENT_LOG === '1';
const logger = {
  info: (...a) => verbose && console.error(...a),
  debug: (...a) => verbose && console.error(...a),
  warn: (...a) => console.error(...a),
  error: (...a) => console.error(...a),
};

const producer = new Producer({
  nameSrv: opts.nameSrv,
  httpclient: {}, // asserted present by ali-ons; only used with onsAddr, never here
  clientIP: '127.0.0.1', // ali-ons takes the first outside address otherwise
  ...(opts.accessKey ? { accessKey: opts.accessKey, secretKey: opts.secretKey } : {}), // ACL: ali-ons signs
  producerGroup: opts.group || 'PG_ALI_ONS',
  sendMsgTimeout: opts.sendTimeoutMillis || 3000,
  logger,
});
producer.on('error', err => process.stderr.write(`producer.js: client error: ${err && err.message || err}\n`));

async function sendOne(i, spec) {
  const body = Buffer.from(spec.body, 'utf8');
  const msg = new Message(spec.topic, spec.tags || '', body);
  if (spec.keys && spec.keys.length) {
    msg.keys = spec.keys;
  }
  for (const [ k, v ] of Object.entries(spec.properties || {})) {
    msg.properties[k] = String(v); // user properties (what a SQL92 subscription selects on)
  }
  const sentAt = now();
  try {
    const r = await producer.send(msg);
    emit({
      event: 'sent',
      i,
      status: r.sendStatus,
      msgId: r.msgId,
      queueId: num(r.messageQueue.queueId), // a string as the response header carries it
      queueOffset: num(r.queueOffset),
      compressed: msg.body !== body, // ali-ons swaps in the deflated body (tryToCompressMessage)
      bodySha256: crypto.createHash('sha256').update(body).digest('hex'),
      bodyLength: body.length,
      sentAt,
    });
  } catch (err) {
    emit({ event: 'failed', i, message: String(err && err.message || err) });
  }
}

let closing = null;
function close() {
  if (!closing) {
    closing = (async () => {
      let code = 0;
      try {
        await producer.close();
        emit({ event: 'closed' });
      } catch (err) {
        process.stderr.write(`producer.js: close failed: ${err && err.stack || err}\n`);
        code = 1;
      }
      process.exit(code);
    })();
  }
  return closing;
}
process.on('SIGTERM', () => close());

(async () => {
  try {
    await producer.ready();
  } catch (err) {
    process.stderr.write(`producer.js: the producer did not start (name server ${opts.nameSrv}): ${err && err.stack || err}\n`);
    process.exit(1);
  }
  emit({ event: 'ready' });
  const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  let i = 0;
  for await (const line of lines) {
    if (!line.trim()) {
      continue;
    }
    let spec;
    try {
      spec = JSON.parse(line);
      if (typeof spec.topic !== 'string' || typeof spec.body !== 'string') {
        throw new Error('a message needs "topic" and "body" strings');
      }
    } catch (err) {
      process.stderr.write(`producer.js: bad message line ${i}: ${err.message}\n`);
      process.exit(2);
    }
    await sendOne(i, spec);
    i += 1;
  }
  await close();
})();
