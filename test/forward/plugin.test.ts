import assert from 'node:assert/strict';
import { inspect } from 'node:util';
import { test } from 'node:test';
import { continuation, HypsinkError } from '../../types/index.js';
import { loadForward, makeUnit, partition } from './helpers.js';

test('manifest and registration: the sink is registered under the manifest name', async () => {
  const f = await loadForward();
  assert.deepEqual(f.manifest, {
    name: '@hypsink/forward',
    version: '0.1.0',
    apiVersion: '1.0.0',
    provides: ['sink'],
  });
  assert.equal(f.factory.name, '@hypsink/forward');
});

test('the documented sink config is accepted, with defaults for the limits', async () => {
  const f = await loadForward();
  const s = f.build({ url: 'http://127.0.0.1:8787', token: 'interpolated-token-value' });
  assert.deepEqual(s.limits, { maxRows: 20_000, maxBytes: 4 * 1024 * 1024 });
  const t = f.build({ url: 'https://central.example/base/', maxRows: 10, maxBytes: 1000 });
  assert.deepEqual(t.limits, { maxRows: 10, maxBytes: 1000 });
  await s.close();
  await t.close();
});

test('a token bound for plain http:// off this machine is warned about once per sink, never quoted', async () => {
  const cases: [Record<string, unknown>, boolean][] = [
    [{ url: 'http://central.example:8787', token: 'tok-abcdef' }, true],
    [{ url: 'http://10.0.0.7', token: 'tok-abcdef' }, true],
    [{ url: 'https://central.example', token: 'tok-abcdef' }, false],
    [{ url: 'http://127.0.0.1:8787', token: 'tok-abcdef' }, false],
    [{ url: 'http://localhost:8787', token: 'tok-abcdef' }, false],
    [{ url: 'http://[::1]:8787', token: 'tok-abcdef' }, false],
    [{ url: 'http://central.example:8787' }, false],
  ];
  for (const [config, warned] of cases) {
    const f = await loadForward();
    const s = f.build(config);
    const warnings = f.log.lines.filter((l) => l.includes('plain http://'));
    assert.equal(warnings.length, warned ? 1 : 0, `${JSON.stringify(config.url)}: ${f.log.text}`);
    assert.ok(!f.log.text.includes('tok-abcdef'), 'the token is never quoted');
    if (warned) assert.match(warnings[0]!, /sink \\"central\\" sends its bearer token over plain http:\/\/ to /);
    await s.close();
  }
});

test('bad config: one HYPSINK_ERR_CONFIG naming the sink and each field, never echoing the token', async () => {
  const f = await loadForward();
  const cases: [Record<string, unknown>, RegExp][] = [
    [{}, /^sink "central": config\.url: required/],
    [{ url: 'ftp://x' }, /config\.url: must be an http\(s\) URL/],
    [{ url: 'not a url' }, /config\.url: must be an http\(s\) URL/],
    [{ url: 'http://user:pw@h:1' }, /config\.url: must not carry credentials/],
    [{ url: 'http://h:1', token: '' }, /config\.token: is empty/],
    [{ url: 'http://h:1', maxRows: 0 }, /config\.maxRows:/],
    [{ url: 'http://h:1', ladderMs: [] }, /config\.ladderMs:/],
    [{ url: 'http://h:1', retry: { attempts: 0 } }, /config\.retry\.attempts:/],
    [{ url: 'http://h:1', tokne: 'x' }, /config\.tokne: unknown field/],
    [{ url: 'ftp://x', maxBytes: 'big' }, /config\.url: .*; config\.maxBytes: /],
  ];
  for (const [config, re] of cases) {
    assert.throws(
      () => f.build(config),
      (e: unknown) => {
        assert.ok(e instanceof HypsinkError, String(e));
        assert.equal(e.code, 'HYPSINK_ERR_CONFIG');
        assert.match(e.message, re);
        return true;
      },
      JSON.stringify(config),
    );
  }
  const secret = 'has space-secret-123';
  assert.throws(
    () => f.build({ url: 'http://h:1', token: secret }),
    (e: Error) => /config\.token: must be visible ASCII/.test(e.message) && !inspect(e).includes('secret-123'),
  );
});

test('unitId: a pure function of sink, partition, since and until; readable and header-safe', async () => {
  const f = await loadForward();
  const a = f.build({ url: 'http://127.0.0.1:1' }, 'central');
  const a2 = f.build({ url: 'http://127.0.0.1:2', token: 'other' }, 'central');
  const b = f.build({ url: 'http://127.0.0.1:1' }, 'backup');
  const p = partition('activity', 'laptop-1');
  const id = a.unitId(p, continuation(100), continuation(250));
  assert.equal(id, a.unitId(p, continuation(100), continuation(250)), 'deterministic');
  assert.equal(id, a2.unitId(p, continuation(100), continuation(250)), 'url and token are not identity');
  assert.match(id, /^hfw1-100-250-[0-9a-f]{32}$/);
  assert.match(a.unitId(p, null, continuation(7)), /^hfw1-start-7-[0-9a-f]{32}$/);
  const others = [
    b.unitId(p, continuation(100), continuation(250)),
    a.unitId(partition('activity', 'laptop-2'), continuation(100), continuation(250)),
    a.unitId(partition('other', 'laptop-1'), continuation(100), continuation(250)),
    a.unitId(p, continuation(101), continuation(250)),
    a.unitId(p, continuation(100), continuation(251)),
    a.unitId(p, null, continuation(250)),
    f.build({ url: 'http://127.0.0.1:1', idNamespace: 'host-b' }).unitId(p, continuation(100), continuation(250)),
  ];
  assert.equal(new Set([id, ...others]).size, others.length + 1, 'every input is part of the identity');
  for (const x of others) assert.match(x, /^[\x21-\x7e]{1,256}$/);
});

test('the shutdown hook closes every shipper: ship then fails fast with ABORTED', async () => {
  const f = await loadForward();
  const s = f.build({ url: 'http://127.0.0.1:1' });
  await f.hooks.shutdown.promise();
  const u = makeUnit({ shipper: s, partition: partition('a', 'b'), rows: [{ x: 1 }], since: null });
  await assert.rejects(s.ship(u), (e: HypsinkError) => e.code === 'HYPSINK_ERR_ABORTED');
  await s.close(); // idempotent
});
