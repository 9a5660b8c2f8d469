// A Node.js consumer of Flotilla's job-states and job-specs topics, as another team would write it:
// kafkajs for Kafka, avsc for Avro, the .avsc files parsed in the order schemas/README.md gives, and
// Avro's single-object encoding checked against the fingerprint it computes itself (CRC-64-AVRO of
// the schema's Parsing Canonical Form). A job's state and its spec share the key (the job id).
//
// node consumer.js BROKERS STATES_TOPIC SPECS_TOPIC SCHEMA_DIR EXPECTED_JOBS TIMEOUT_S
// Prints one JSON object: {"fingerprints": {topic: hex}, "states": {job id: latest state},
// "specs": {job id: spec}, "refused": [reasons]}.
'use strict';

const fs = require('fs');
const path = require('path');
const avro = require('avsc');
const { Kafka, logLevel } = require('kafkajs');

const [brokers, statesTopic, specsTopic, schemaDir, expected, timeoutS] = process.argv.slice(2);

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

// File name -> its Avro type, every file parsed into one registry in the README's order.
function types() {
  const readme = fs.readFileSync(path.join(schemaDir, 'README.md'), 'utf8');
  const files = [...readme.matchAll(/^\| \d+ \| `([a-z_]+\.avsc)` \|/gm)].map((m) => m[1]);
  const registry = {};
  const found = {};
  for (const file of files) {
    found[file] = avro.Type.forSchema(JSON.parse(fs.readFileSync(path.join(schemaDir, file), 'utf8')), { registry });
  }
  return found;
}

function single(type) {
  return Buffer.concat([Buffer.from([0xc3, 0x01]), fingerprint(JSON.stringify(type.schema()))]);
}

async function main() {
  const parsed = types();
  // topic -> [type, header, where its values go]
  const states = {};
  const specs = {};
  const readers = {
    [statesTopic]: [parsed['job_state.avsc'], states],
    [specsTopic]: [parsed['job_submitted.avsc'], specs],
  };
  for (const reader of Object.values(readers)) reader.splice(1, 0, single(reader[0]));
  const refused = [];
  const kafka = new Kafka({ clientId: 'node-consumer', brokers: brokers.split(','), logLevel: logLevel.WARN });
  const consumer = kafka.consumer({
    groupId: `node-consumer-${process.pid}-${Date.now()}`,
    sessionTimeout: 10000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 1000,
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [statesTopic, specsTopic], fromBeginning: true });
  let finish;
  const done = new Promise((resolve) => (finish = resolve));
  const timer = setTimeout(finish, Number(timeoutS) * 1000);
  await consumer.run({
    eachMessage: async ({ topic, message }) => {
      const [type, header, latest] = readers[topic];
      const key = message.key.toString();
      const value = message.value;
      if (value === null) {
        delete latest[key];
      } else if (!value.subarray(0, 10).equals(header)) {
        refused.push(`${topic} ${key}: header ${value.subarray(0, 10).toString('hex')} is not ${header.toString('hex')}`);
      } else {
        latest[key] = type.fromBuffer(value.subarray(10));
      }
      if (Object.keys(states).length >= Number(expected) && Object.keys(specs).length >= Number(expected)) finish();
    },
  });
  await done;
  clearTimeout(timer);
  await consumer.disconnect();
  const fingerprints = Object.fromEntries(Object.entries(readers).map(([topic, reader]) => [topic, reader[1].subarray(2).toString('hex')]));
  process.stdout.write(JSON.stringify({ fingerprints, states, specs, refused }) + '\n');
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
