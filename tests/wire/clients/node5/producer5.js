'use strict';
// RocketMQ's official Node.js 5.x client (npm rocketmq-client-nodejs) driven by tests/wire:
//   node producer5.js '{"endpoints": "127.0.0.1:8081", "topics": ["T"]}'
// prints {"event":"ready"}, then reads one message a line on stdin:
//   {"topic", "body", "tag"?, "keys"?, "props"?, "group"?, "deliverAt"? (epoch ms), "tx"? ("commit"|"rollback")}
// each answered {"event":"sent","i","messageId","offset","transactionId"?,"ended"?} or {"event":"failed","i","error"};
// at the end of stdin the producer shuts down and prints {"event":"closed"}.
// Option "credentials": {"accessKey", "secretKey"}: the client's sessionCredentials (it signs every call).
const readline = require('node:readline');
const { Producer } = require('rocketmq-client-nodejs');

function emit(obj) { process.stdout.write(JSON.stringify(obj) + '\n'); }

// a logger of our own: the default one writes under $HOME and fails after shutdown
const quiet = { info() {}, warn() {}, debug() {}, error(...args) { process.stderr.write(args.map(String).join(' ') + '\n'); } };

async function main() {
  let opts;
  try { opts = JSON.parse(process.argv[2]); } catch (e) {
    process.stderr.write('usage: producer5.js OPTIONS_JSON\n'); process.exit(2);
  }
  const checker = { async check() { return 2; } };  // ROLLBACK (orphans: tests commit or roll back themselves)
  const sessionCredentials = opts.credentials
    ? { accessKey: opts.credentials.accessKey, accessSecret: opts.credentials.secretKey } : undefined;
  const producer = new Producer({ endpoints: opts.endpoints, namespace: '', topics: opts.topics, logger: quiet, checker,
                                  sessionCredentials });
  try { await producer.startup(); } catch (e) {
    emit({ event: 'start_failed', error: String(e && e.message || e) }); process.exit(1);
  }
  emit({ event: 'ready' });
  const rl = readline.createInterface({ input: process.stdin });
  let i = 0;
  for await (const line of rl) {
    const n = i++;
    const spec = JSON.parse(line);
    const msg = { topic: spec.topic, body: Buffer.from(spec.body) };
    if (spec.tag) msg.tag = spec.tag;
    if (spec.keys) msg.keys = spec.keys;
    if (spec.props) msg.properties = new Map(Object.entries(spec.props));
    if (spec.group) msg.messageGroup = spec.group;
    if (spec.deliverAt) msg.deliveryTimestamp = new Date(spec.deliverAt);
    try {
      const tx = spec.tx ? producer.beginTransaction() : undefined;
      const r = await producer.send(msg, tx);
      const out = { event: 'sent', i: n, messageId: r.messageId, offset: Number(r.offset), transactionId: r.transactionId };
      if (tx && (spec.tx === 'commit' || spec.tx === 'rollback')) {
        await (spec.tx === 'commit' ? tx.commit() : tx.rollback());
        out.ended = spec.tx;
      }
      emit(out);
    } catch (e) {
      emit({ event: 'failed', i: n, error: String(e && e.message || e) });
    }
  }
  await producer.shutdown();
  emit({ event: 'closed' });
  process.exit(0);
}

main();
