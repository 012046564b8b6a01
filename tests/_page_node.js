// Runs an explorer page's script in node (no browser): node _page_node.js PAGE.html PIXELS.json CALLS.json
// PIXELS.json: {"image": [RGBA bytes of D.image], "ucm": [RGBA bytes of D.ucm]} (the embedded PNGs,
// decoded by the caller); CALLS.json: [["setRegions", 5], ["labels"], ...], the page's API calls
// (window.hisegView); prints their results as one JSON array.
'use strict';
const fs = require('fs');
const [page, pixelsFile, callsFile] = process.argv.slice(2);
const html = fs.readFileSync(page, 'utf8');
const data = html.match(/<script type="application\/json" id="hiseg-data">([\s\S]*?)<\/script>/)[1];
const scripts = html.split('<script>');
let code = scripts[scripts.length - 1].split('</script>')[0];
const pixels = JSON.parse(fs.readFileSync(pixelsFile, 'utf8'));
const calls = JSON.parse(fs.readFileSync(callsFile, 'utf8'));
const decode = 'Promise.all([decodePng(D.image, W, H), decodePng(D.ucm, W2, 2 * H + 1)])';
if (!code.includes(decode)) throw new Error('the page no longer decodes its PNGs as expected');
code = code.replace(decode, 'Promise.resolve([new Uint8ClampedArray(PIXELS.image), new Uint8ClampedArray(PIXELS.ucm)])');
const els = {};
const initial = { mode: 'level', fill: 'palette', alpha: '65' };  // the page's defaults
function el(id) {
  if (!els[id]) {
    els[id] = { id, value: initial[id] || '0', checked: id === 'contours', textContent: '', hidden: false, style: {},
                min: 0, max: 0, addEventListener() {},
                getBoundingClientRect() { return { left: 0, top: 0, width: 1, height: 1 }; },
                getContext() { return { createImageData(w, h) { return { data: new Uint8ClampedArray(4 * w * h) }; },
                                        putImageData() {} }; } };
  }
  return els[id];
}
global.document = { getElementById: (id) => id === 'hiseg-data' ? { textContent: data } : el(id) };
global.window = {};
global.atob = (s) => Buffer.from(s, 'base64').toString('binary');
global.PIXELS = pixels;
new Function(code)();
setImmediate(() => {
  const api = global.window.hisegView;
  if (!api.ready) throw new Error('the page did not start: ' + api.error);
  const out = calls.map(([name, ...args]) => api[name](...args));
  process.stdout.write(JSON.stringify(out));
});
