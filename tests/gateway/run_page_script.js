// Runs the site page's events script (tests/gateway/test_events.py) in Node: the few browser calls it makes are
// stubbed over the page's real attributes, and the beacons it sends are printed as JSON [[url, body], ...].
// stdin: {"script": ..., "list": {"start": ..., "data-esrr-...": ...}, "click": index of the result to click}
"use strict";
const crypto = require("crypto");
let input = "";
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const given = JSON.parse(input);
  const beacons = [];
  const listeners = {};
  const ids = JSON.parse(given.list["data-esrr-ids"]);
  const list = {
    getAttribute: (name) => given.list[name],
    addEventListener: (type, listener) => { listeners[type] = listener; },
    contains: () => true,
  };
  const items = ids.map(() => ({}));
  items.forEach((item) => { item.link = {closest: (selector) => (selector === "li.result" ? item : null)}; });
  list.querySelectorAll = (selector) => (selector === "li.result" ? items : []);
  const storage = {};
  global.document = {getElementById: (id) => (id === "esrr-results" ? list : null)};
  global.window = {
    crypto: {getRandomValues: (bytes) => crypto.randomFillSync(bytes)},
    sessionStorage: {getItem: (key) => storage[key] || null, setItem: (key, value) => { storage[key] = value; }},
  };
  Object.defineProperty(global, "navigator", {value: {sendBeacon: (url, body) => { beacons.push([url, body]); return true; }}});
  new Function(given.script)();
  const link = items[given.click].link;
  listeners.click({target: {closest: (selector) => (selector === "a[href]" ? link : null)}});
  process.stdout.write(JSON.stringify(beacons));
});
