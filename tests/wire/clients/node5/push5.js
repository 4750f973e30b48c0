'use strict';
// RocketMQ's official Node.js 5.x client's PushConsumer (npm rocketmq-client-nodejs) driven by tests/wire:
//   node push5.js '{"endpoints": "127.0.0.1:8081", "group": "G", "topic": "T", "fail": ["body"]}'
// prints {"event":"ready"}; then, for every message its listener is given,
//   {"event":"consumed","messageId","body","attempt","result"}
// where result is FAILURE for a body listed in "fail" on its first attempt (the client then has it
// delivered again after its retry policy's delay), SUCCESS otherwise (the client acks it). At the
// end of stdin it shuts down and prints {"event":"closed"}. A start that throws prints
// {"event":"start_failed","error"} and exits 1; bad options: a usage line, exit 2.
const readline = require('node:readline');
const { PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');

function emit(obj) { process.stdout.write(JSON.stringify(obj) + '\n'); }

const quiet = { info() {}, warn() {}, debug() {}, error(...args) { process.stderr.write(args.map(String).join(' ') + '\n'); } };

async function main() {
  let opts;
  try { opts = JSON.parse(process.argv[2]); } catch (e) { opts = null; }
  if (!opts || !opts.endpoints || !opts.group || !opts.topic) {
    process.stderr.write('usage: push5.js OPTIONS_JSON (endpoints, group, topic)\n'); process.exit(2);
  }
  const fail = new Set(opts.fail ?? []);
  const consumer = new PushConsumer({
    endpoints: opts.endpoints, namespace: '', consumerGroup: opts.group, logger: quiet,
    subscriptions: new Map([[opts.topic, '*']]),
    messageListener: {
      consume(m) {
        const body = m.body.toString();
        const result = fail.has(body) && (m.deliveryAttempt ?? 1) === 1 ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
        emit({ event: 'consumed', messageId: m.messageId, body, attempt: m.deliveryAttempt ?? null, result: result.name });
        return result;
      },
    },
  });
  try { await consumer.startup(); } catch (e) {
    emit({ event: 'start_failed', error: String(e && e.message || e) }); process.exit(1);
  }
  emit({ event: 'ready' });
  const rl = readline.createInterface({ input: process.stdin });
  for await (const _ of rl) { /* nothing to do: consumption runs by itself until stdin ends */ }
  await consumer.shutdown();
  emit({ event: 'closed' });
  process.exit(0);
}

main();
