'use strict';
// An ali-ons push consumer driven by tests/wire (tests/wire/real_clients.py).
//
//   node consumer.js '{"nameSrv": "127.0.0.1:9876", "group": "CG", "topic": "T", "model": "CLUSTERING",
//                      "count": 10, "suspendMillis": 2000, "rebalanceMillis": 1000, "tags": "*"}'
//   ("sql92": "a > 5" instead of "tags": a SQL92 subscription)
//
// Prints one JSON object a line on stdout (and nothing else there):
//   {"event": "ready", "clientId"}                      after consumer.ready()
//   {"event": "rebalance", "queues": [queueId...]}      the queues of `topic` it holds, after every change
//   {"event": "pulling", "queueId", "offset"}           a pull of `topic` goes out (a held pull, when empty)
//   {"event": "message", "msgId", "topic", "tags", "keys", "queueId", "queueOffset", "bodySha256", "bodyLength",
//    "reconsumeTimes", "properties", "receivedAt"}                    every message the handler gets (receivedAt: epoch ms, fractional)
//   {"event": "error", "message"}                       an 'error' event of the client (it goes on after one)
//   {"event": "closed"}                                 after close(), which commits the offsets (exit code 0)
// It closes and exits after `count` messages (0: never), on SIGTERM or SIGINT, and on end of stdin
// when `closeOnStdinEnd` is set. With `failUntil` N the handler throws for a delivery whose
// reconsumeTimes is below N (ali-ons then sends it back, CONSUMER_SEND_MSG_BACK 36, and it comes
// again from %RETRY%<group>); every delivery is printed as `message`, with `"failed": true` when
// the handler threw. `maxReconsumeTimes` is the consumer option (16 by default). Warnings and errors of ali-ons go to stderr; RMQ_CLIENT_LOG=1 adds its info log.
const crypto = require('crypto');
const { performance } = require('perf_hooks');
const { Consumer } = require('ali-ons');
const ConsumeFromWhere = require('ali-ons/lib/consumer/consume_from_where');

const opts = JSON.parse(process.argv[2] || '{}');
for (const key of [ 'nameSrv', 'group', 'topic' ]) {
  if (!opts[key]) {
    process.stderr.write(`consumer.js: option ${key} is required\n`);
    process.exit(2);
  }
}
const now = () => performance.timeOrigin + performance.now();
// ali-ons keeps 64-bit offsets as long.js Longs in places
const num = v => (v && typeof v.toNumber === 'function' ? v.toNumber() : Number(v));
const emit = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const verbose = process.env.RMQ_CLIENT_LOG === '1';
const logger = {
  info: (...a) => verbose && console.error(...a),
  debug: (...a) => verbose && console.error(...a),
  warn: (...a) => console.error(...a),
  error: (...a) => console.error(...a),
};

const suspend = opts.suspendMillis || 3000;
const consumer = new Consumer({
  nameSrv: opts.nameSrv,
  httpclient: {}, // asserted present by ali-ons; only used with onsAddr, never here
  clientIP: '127.0.0.1', // ali-ons takes the first outside address otherwise
  ...(opts.accessKey ? { accessKey: opts.accessKey, secretKey: opts.secretKey } : {}), // ACL: ali-ons signs
  consumerGroup: opts.group,
  isBroadcast: opts.model === 'BROADCASTING',
  consumeFromWhere: ConsumeFromWhere[opts.from || 'CONSUME_FROM_FIRST_OFFSET'],
  brokerSuspendMaxTimeMillis: suspend,
  consumerTimeoutMillisWhenSuspend: suspend * 2,
  rebalanceInterval: opts.rebalanceMillis || 10000,
  pollNameServerInteval: opts.pollNameServerMillis || 30000,
  persistConsumerOffsetInterval: opts.persistMillis || 5000,
  ...(opts.maxReconsumeTimes !== undefined ? { maxReconsumeTimes: opts.maxReconsumeTimes } : {}),
  logger,
});
consumer.on('error', err => emit({ event: 'error', message: String(err && err.message || err) }));

// What the queues held are and when a pull goes out are not events of ali-ons' API: read them
// from its pull loop and its queue table (lib/consumer/mq_push_consumer.js) so that a test waits on
// events instead of sleeping for a rebalance interval.
const pullKernelImpl = consumer.pullKernelImpl.bind(consumer);
consumer.pullKernelImpl = (mq, ...rest) => {
  if (mq.topic === opts.topic) {
    emit({ event: 'pulling', queueId: mq.queueId, offset: num(rest[3]) });
  }
  return pullKernelImpl(mq, ...rest);
};
const held = () => [ ...consumer.processQueueTable.values() ]
  .map(r => r.messageQueue)
  .filter(mq => mq.topic === opts.topic)
  .map(mq => mq.queueId)
  .sort((a, b) => a - b);
let lastHeld = null;
consumer.on(`topic_${opts.topic}_queue_changed`, () => {
  const queues = held();
  if (JSON.stringify(queues) !== JSON.stringify(lastHeld)) {
    lastHeld = queues;
    emit({ event: 'rebalance', queues });
  }
});

let received = 0;
let closing = null;
function close(code) {
  if (!closing) {
    closing = (async () => {
      try {
        await consumer.close();
        emit({ event: 'closed' });
      } catch (err) {
        process.stderr.write(`consumer.js: close failed: ${err && err.stack || err}\n`);
        code = 1;
      }
      process.exit(code);
    })();
  }
  return closing;
}

const failUntil = opts.failUntil || 0;
// `sql92`: a SQL92 subscription ({expressionType, subString}: ali-ons sends it in its heartbeat and pulls)
const subscription = opts.sql92 ? { expressionType: 'SQL92', subString: opts.sql92 } : (opts.tags || '*');
consumer.subscribe(opts.topic, subscription, async msg => {
  received += 1;
  const fail = msg.reconsumeTimes < failUntil;
  emit({
    event: 'message',
    msgId: msg.msgId,
    topic: msg.topic,
    tags: msg.tags || null,
    keys: msg.keys || null,
    queueId: msg.queueId,
    queueOffset: num(msg.queueOffset),
    bodySha256: crypto.createHash('sha256').update(msg.body || Buffer.alloc(0)).digest('hex'),
    bodyLength: msg.body ? msg.body.length : 0,
    reconsumeTimes: msg.reconsumeTimes,
    originMsgId: msg.originMessageId || null,
    properties: msg.properties,
    receivedAt: now(),
    ...(fail ? { failed: true } : {}),
  });
  if (fail) {
    throw new Error(`failing on purpose (reconsumeTimes ${msg.reconsumeTimes} < failUntil ${failUntil})`);
  }
  if (opts.count && received >= opts.count) {
    // after this handler returns, so that the message counts as consumed when the offsets are committed
    setImmediate(() => close(0));
  }
});

process.on('SIGTERM', () => close(0));
process.on('SIGINT', () => close(0));
if (opts.closeOnStdinEnd) {
  process.stdin.on('end', () => close(0));
  process.stdin.resume();
}

(async () => {
  try {
    await consumer.ready();
  } catch (err) {
    process.stderr.write(`consumer.js: the consumer did not start (name server ${opts.nameSrv}): ${err && err.stack || err}\n`);
    process.exit(1);
  }
  emit({ event: 'ready', clientId: consumer._mqClient.clientId });
  const queues = held();
  if (queues.length && lastHeld === null) {
    lastHeld = queues;
    emit({ event: 'rebalance', queues });
  }
})();
