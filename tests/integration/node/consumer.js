// A Node.js consumer of Flotilla's job-states topic, as another team would write it: kafkajs for
// Kafka, avsc for Avro, the .avsc files parsed in the order schemas/README.md gives, and Avro's
// single-object encoding checked against the fingerprint it computes itself (CRC-64-AVRO of the
// schema's Parsing Canonical Form).
//
// node consumer.js BROKERS TOPIC SCHEMA_DIR EXPECTED_JOBS TIMEOUT_S
// Prints one JSON object: {"fingerprint": hex, "states": {job id: latest state}, "refused": [reasons]}.
'use strict';

const fs = require('fs');
const path = require('path');
const avro = require('avsc');
const { Kafka, logLevel } = require('kafkajs');

const [brokers, topic, schemaDir, expected, timeoutS] = process.argv.slice(2);

// CRC-64-AVRO (Rabin), as the Avro specification defines it.
const EMPTY = 0xc15d213aa4d7a795n;
const TABLE = Array.from({ length: 256 }, (_, i) => {
  let fp = BigInt(i);
  for (let j = 0; j < 8; j++) fp = (fp >> 1n) ^ (EMPTY & -(fp & 1n));
  return fp;
});
function fingerprint(text) {
  let fp = EMPTY;
  for (const byte of Buffer.from(text, 'utf8')) fp = (fp >> 8n) ^ TABLE[Number((fp ^ BigInt(byte)) & 0xffn)];
  const out = Buffer.alloc(8);
  out.writeBigUInt64LE(fp);
  return out;
}

function jobStateType() {
  const readme = fs.readFileSync(path.join(schemaDir, 'README.md'), 'utf8');
  const files = [...readme.matchAll(/^\| \d+ \| `([a-z_]+\.avsc)` \|/gm)].map((m) => m[1]);
  const registry = {};
  let jobState = null;
  for (const file of files) {
    const type = avro.Type.forSchema(JSON.parse(fs.readFileSync(path.join(schemaDir, file), 'utf8')), { registry });
    if (file === 'job_state.avsc') jobState = type;
  }
  return jobState;
}

async function main() {
  const type = jobStateType();
  const header = Buffer.concat([Buffer.from([0xc3, 0x01]), fingerprint(JSON.stringify(type.schema()))]);
  const states = {};
  const refused = [];
  const kafka = new Kafka({ clientId: 'node-consumer', brokers: brokers.split(','), logLevel: logLevel.WARN });
  const consumer = kafka.consumer({
    groupId: `node-consumer-${process.pid}-${Date.now()}`,
    sessionTimeout: 10000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 1000,
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  let finish;
  const done = new Promise((resolve) => (finish = resolve));
  const timer = setTimeout(finish, Number(timeoutS) * 1000);
  await consumer.run({
    eachMessage: async ({ message }) => {
      const value = message.value;
      if (value === null) {
        delete states[message.key.toString()];
      } else if (!value.subarray(0, 10).equals(header)) {
        refused.push(`${message.key}: header ${value.subarray(0, 10).toString('hex')} is not ${header.toString('hex')}`);
      } else {
        const state = type.fromBuffer(value.subarray(10));
        states[state.job_id] = state;
      }
      if (Object.keys(states).length >= Number(expected)) finish();
    },
  });
  await done;
  clearTimeout(timer);
  await consumer.disconnect();
  process.stdout.write(JSON.stringify({ fingerprint: header.subarray(2).toString('hex'), states, refused }) + '\n');
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
