'use strict';
// RocketMQ's official Node.js 5.x client's SimpleConsumer (npm rocketmq-client-nodejs) driven by tests/wire:
//   node consumer5.js '{"endpoints": "127.0.0.1:8081", "group": "G", "topic": "T", "awaitMs": 5000}'
// prints {"event":"ready"}, then reads one command a line on stdin:
//   {"op": "receive", "n", "invisibleMs"} -> {"event":"received","messages":[{"messageId","body","attempt","group"}]}
//   {"op": "ack", "ids": [...]}           -> {"event":"acked","ids"}
// a command that throws: {"event":"failed","op","error"}; at the end of stdin it shuts down, {"event":"closed"}.
// Option "credentials": {"accessKey", "secretKey"}: the client's sessionCredentials (it signs every call).
const readline = require('node:readline');
const { SimpleConsumer } = require('rocketmq-client-nodejs');

function emit(obj) { process.stdout.write(JSON.stringify(obj) + '\n'); }

// a logger of our own: the default one writes under $HOME and fails after shutdown
const quiet = { info() {}, warn() {}, debug() {}, error(...args) { process.stderr.write(args.map(String).join(' ') + '\n'); } };

async function main() {
  let opts;
  try { opts = JSON.parse(process.argv[2]); } catch (e) {
    process.stderr.write('usage: consumer5.js OPTIONS_JSON\n'); process.exit(2);
  }
  const consumer = new SimpleConsumer({
    endpoints: opts.endpoints, namespace: '', consumerGroup: opts.group, logger: quiet,
    subscriptions: new Map([[opts.topic, '*']]), awaitDuration: opts.awaitMs ?? 5000,
    sessionCredentials: opts.credentials
      ? { accessKey: opts.credentials.accessKey, accessSecret: opts.credentials.secretKey } : undefined,
  });
  try { await consumer.startup(); } catch (e) {
    emit({ event: 'start_failed', error: String(e && e.message || e) }); process.exit(1);
  }
  emit({ event: 'ready' });
  const kept = new Map();
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    const cmd = JSON.parse(line);
    try {
      if (cmd.op === 'receive') {
        const got = await consumer.receive(cmd.n ?? 32, cmd.invisibleMs ?? 15000);
        for (const m of got) kept.set(m.messageId, m);
        emit({ event: 'received', messages: got.map(m => ({ messageId: m.messageId, body: m.body.toString(),
          attempt: m.deliveryAttempt, group: m.messageGroup ?? null })) });
      } else if (cmd.op === 'ack') {
        for (const id of cmd.ids) await consumer.ack(kept.get(id));
        emit({ event: 'acked', ids: cmd.ids });
      }
    } catch (e) {
      emit({ event: 'failed', op: cmd.op, error: String(e && e.message || e) });
    }
  }
  await consumer.shutdown();
  emit({ event: 'closed' });
  process.exit(0);
}

main();
