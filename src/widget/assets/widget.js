// The chat widget of the embed tag:
//   <script src="{PUBLIC_URL}/widget.js" data-widget="wgt_..." async></script>
// Hand-written and dependency-free; served by WidgetScriptController inside one function
// scope after the dashboard's escape-first Markdown renderer (`SafeMarkdown`), so that it
// leaves no global on the host page. It draws a launcher and a panel in a Shadow DOM: the
// host page's CSS reaches only the host element, whose every property is reset by the
// `:host` rule below with !important (which, for a shadow host, wins over the page's own
// !important). Styles go in through adoptedStyleSheets, which a page's CSP does not block.
// The visitor token (issued by the service, signed, kept in localStorage per widget) is all
// that identifies a visitor: the server keeps the conversation and the widget reads it again
// after a reload. A token refused (expired, or the visitor's address changed) is renewed
// once, keeping the visitor's id.
//
// Preview (the dashboard's widget page): data-preview names the element to draw into, whose
// data-config holds the configuration; nothing is sent, and an `acs-widget-preview` event on
// the document redraws it with new settings (the page's own script sends it as they change).
/* global document, localStorage, fetch, TextDecoder, CSSStyleSheet, SafeMarkdown */
'use strict';

var script = document.currentScript || document.querySelector('script[data-widget]');
var widgetId = script && script.getAttribute('data-widget');
var previewSource = script && script.getAttribute('data-preview');
var VISITOR_KEY = 'acs-widget-visitor';

var CSS =
  ':host{all:initial!important;display:block!important;position:fixed!important;right:0!important;bottom:0!important;width:0!important;height:0!important;z-index:2147483000!important;visibility:visible!important;opacity:1!important;transform:none!important}' +
  ':host([data-inline]){position:relative!important;width:100%!important;height:580px!important;z-index:auto!important}' +
  '.acs{--accent:#1e66f5;--bg:#fff;--fg:#1f2328;--muted:#59636e;--bubble:#f0f2f5;--border:#d0d7de;font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);letter-spacing:normal;text-align:left;text-transform:none}' +
  '.acs.dark{--bg:#1e2228;--fg:#e6edf3;--muted:#9ea7b3;--bubble:#2d333b;--border:#444c56}' +
  ':where(.acs *){box-sizing:border-box;font:inherit;color:inherit;margin:0;letter-spacing:inherit}' +
  '.launcher,.panel{position:fixed;bottom:20px;right:20px}.left .launcher,.left .panel{right:auto;left:20px}' +
  ':host([data-inline]) .launcher,:host([data-inline]) .panel{position:absolute}' +
  // In the dashboard's preview the panel fits its frame (580 px): at its page height it rose above it, over the text.
  ':host([data-inline]) .panel{top:12px;height:auto;width:min(380px,calc(100% - 40px))}' +
  '.launcher{width:56px;height:56px;border-radius:50%;border:0;padding:0;background:var(--accent);color:#fff;cursor:pointer;box-shadow:0 4px 14px rgba(0,0,0,.25);display:flex;align-items:center;justify-content:center}' +
  '.launcher svg{width:28px;height:28px;fill:none;stroke:currentColor;stroke-width:2}' +
  'button:focus-visible,a:focus-visible,textarea:focus-visible,.log:focus-visible{outline:3px solid var(--accent);outline-offset:2px}' +
  '.panel{bottom:88px;width:min(380px,calc(100vw - 40px));height:min(540px,calc(100vh - 120px));background:var(--bg);border:1px solid var(--border);border-radius:12px;box-shadow:0 8px 30px rgba(0,0,0,.25);display:flex;flex-direction:column;overflow:hidden}' +
  '.panel[hidden]{display:none}' +
  '.head{display:flex;align-items:center;gap:8px;padding:12px 14px;background:var(--accent);color:#fff}' +
  '.head h2{flex:1;font-size:17px;font-weight:600;color:#fff;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}' +
  '.head button{background:transparent;border:0;color:#fff;cursor:pointer;font-size:14px;padding:4px 8px;border-radius:6px}' +
  '.head .close{font-size:22px;line-height:1}' +
  '.log{flex:1;overflow-y:auto;padding:14px;display:flex;flex-direction:column;gap:10px}' +
  '.msg{max-width:85%;padding:8px 12px;border-radius:12px;background:var(--bubble);overflow-wrap:anywhere}' +
  '.msg.user{align-self:flex-end;background:var(--accent);color:#fff;white-space:pre-wrap}' +
  '.msg p+p,.msg ul,.msg ol,.msg pre{margin-top:6px}.msg ul,.msg ol{padding-left:20px}' +
  '.msg code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:14px}.msg pre{overflow-x:auto;white-space:pre}' +
  '.sources{align-self:flex-start;max-width:85%;margin-top:-4px;font-size:13px;color:var(--muted)}.sources ol{margin:2px 0 0;padding-left:20px}.sources a{color:inherit;text-decoration:underline}' +
  '.msg a{color:inherit;text-decoration:underline}.msg strong{font-weight:700}.msg em{font-style:italic}' +
  '.status{padding:0 14px;font-size:14px;color:var(--muted)}.status:empty{display:none}.status.error{color:#b42318;padding:8px 14px}' +
  '.dark .status.error{color:#ff9b8e}' +
  'form{display:flex;gap:8px;padding:10px;border-top:1px solid var(--border)}' +
  'textarea{flex:1;resize:none;min-height:42px;max-height:120px;padding:9px 10px;border:1px solid var(--border);border-radius:8px;background:var(--bg);color:var(--fg)}' +
  'textarea::placeholder{color:var(--muted);opacity:1}' +
  'form button{border:0;border-radius:8px;padding:0 14px;background:var(--accent);color:#fff;cursor:pointer;font-weight:600}' +
  'form button:disabled{opacity:.6;cursor:default}' +
  '.branding{padding:0 10px 8px;text-align:center;font-size:12px;color:var(--muted)}.branding a{color:var(--muted)}' +
  '.sr{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}' +
  '.notice{position:fixed;bottom:20px;right:20px;max-width:260px;padding:8px 12px;border-radius:8px;background:#fff;color:#1f2328;border:1px solid #d0d7de;font-size:14px}';

var ICON = '<svg viewBox="0 0 24 24" aria-hidden="true" focusable="false"><path d="M21 12a8 8 0 0 1-11.6 7.1L4 20l1-4.6A8 8 0 1 1 21 12z"/></svg>';

function el(tag, attributes, text) {
  var node = document.createElement(tag);
  for (var name in attributes) node.setAttribute(name, attributes[name]);
  if (text) node.textContent = text;
  return node;
}

function mount(inline) {
  var host = el('div', { 'data-acs-widget': '' });
  if (inline) host.setAttribute('data-inline', '');
  var root = host.attachShadow({ mode: 'open' });
  if (root.adoptedStyleSheets !== undefined && typeof CSSStyleSheet === 'function' && CSSStyleSheet.prototype.replaceSync) {
    var sheet = new CSSStyleSheet();
    sheet.replaceSync(CSS);
    root.adoptedStyleSheets = [sheet];
  } else {
    root.appendChild(el('style', {}, CSS));
  }
  (inline || document.body).appendChild(host);
  return root;
}

/** Draws the widget into a shadow root; `api` is null in preview (nothing is sent). */
function Widget(root, config, api) {
  var box = el('div', { class: 'acs' });
  var launcher = el('button', { type: 'button', class: 'launcher', 'aria-expanded': 'false', 'aria-controls': 'acs-panel' });
  launcher.innerHTML = ICON;
  var panel = el('section', { class: 'panel', id: 'acs-panel', role: 'dialog', 'aria-labelledby': 'acs-title', hidden: '' });
  var head = el('div', { class: 'head' });
  var title = el('h2', { id: 'acs-title' });
  var restart = el('button', { type: 'button', class: 'new' }, 'New chat');
  var close = el('button', { type: 'button', class: 'close', 'aria-label': 'Close chat' }, '\u00d7');
  var log = el('div', { class: 'log', role: 'log', 'aria-live': 'off', 'aria-label': 'Conversation', tabindex: '0' });
  var status = el('p', { class: 'status', role: 'status' });
  var announcer = el('div', { class: 'sr', 'aria-live': 'polite' });
  var form = el('form', { 'aria-label': 'Send a message' });
  var label = el('label', { class: 'sr', for: 'acs-input' }, 'Your message');
  var input = el('textarea', { id: 'acs-input', rows: '1', maxlength: '2000' });
  var send = el('button', { type: 'submit' }, 'Send');
  var branding = el('p', { class: 'branding' });
  head.append(title, restart, close);
  form.append(label, input, send);
  panel.append(head, log, status, form, branding, announcer);
  box.append(launcher, panel);
  root.appendChild(box);

  var loaded = false;
  var busy = false;

  function configure(next) {
    config = next;
    box.className = 'acs' + (config.theme === 'dark' ? ' dark' : '') + (config.position === 'bottom-left' ? ' left' : '');
    if (/^#[0-9a-fA-F]{6}$/.test(config.accent_color || '')) box.style.setProperty('--accent', config.accent_color);
    title.textContent = config.title;
    launcher.setAttribute('aria-label', 'Open chat: ' + config.title);
    input.setAttribute('placeholder', config.placeholder);
    branding.textContent = '';
    if (config.branding) {
      branding.appendChild(el('a', { href: config.branding.url, target: '_blank', rel: 'noopener noreferrer' }, config.branding.text));
    }
    branding.hidden = !config.branding;
    if (!api) show([]);
  }
  this.configure = configure;

  function bubble(role, text) {
    var node = el('div', { class: 'msg ' + role });
    if (role === 'assistant') node.innerHTML = SafeMarkdown.render(text);
    else node.textContent = text;
    log.appendChild(node);
    log.scrollTop = log.scrollHeight;
    return node;
  }

  /** The sources an answer cites, under it: linked page titles and document names (sent only when the owner shows them). */
  function sourceList(sources) {
    var box = el('div', { class: 'sources' }, 'Sources:');
    var list = el('ol', {});
    sources.forEach(function (source) {
      var item = el('li', {});
      if (source.url && /^https?:\/\//i.test(source.url)) item.appendChild(el('a', { href: source.url, target: '_blank', rel: 'noopener noreferrer nofollow' }, source.label));
      else item.textContent = source.label;
      list.appendChild(item);
    });
    box.appendChild(list);
    log.appendChild(box);
    log.scrollTop = log.scrollHeight;
  }

  /** The greeting, then the conversation's messages. */
  function show(messages) {
    log.textContent = '';
    if (config.greeting) bubble('assistant', config.greeting);
    messages.forEach(function (m) {
      bubble(m.role, m.content);
      if (m.sources && m.sources.length) sourceList(m.sources);
    });
  }

  function say(text, isError) {
    status.textContent = text;
    status.className = 'status' + (isError ? ' error' : '');
  }

  function open() {
    panel.hidden = false;
    launcher.setAttribute('aria-expanded', 'true');
    input.focus();
    if (!loaded && api) {
      loaded = true;
      api.transcript().then(function (t) {
        show(t.messages);
        if (!t.can_continue) say('This conversation is complete: choose New chat to start another.');
      }, function () { say('The conversation could not be loaded.', true); });
    }
  }

  function hide() {
    panel.hidden = true;
    launcher.setAttribute('aria-expanded', 'false');
    launcher.focus();
  }

  launcher.addEventListener('click', function () { if (panel.hidden) open(); else hide(); });
  close.addEventListener('click', hide);
  panel.addEventListener('keydown', function (event) {
    if (event.key === 'Escape') { event.preventDefault(); hide(); }
  });
  input.addEventListener('keydown', function (event) {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) { event.preventDefault(); form.requestSubmit(); }
  });
  restart.addEventListener('click', function () {
    if (busy) return;
    say('');
    if (!api) return show([]);
    api.restart().then(function () { show([]); input.focus(); }, function () { say('Could not start a new chat.', true); });
  });

  form.addEventListener('submit', function (event) {
    event.preventDefault();
    var text = input.value.trim();
    if (!text || busy) return;
    if (!api) return say('This is a preview: visitors chat on your website.');
    busy = true;
    send.disabled = true;
    say('');
    bubble('user', text);
    input.value = '';
    var answer = null;
    var written = '';
    log.setAttribute('aria-busy', 'true');
    var sources = null;
    api.send(text, function (delta) {
      if (!answer) answer = bubble('assistant', '');
      written += delta;
      answer.innerHTML = SafeMarkdown.render(written);
      log.scrollTop = log.scrollHeight;
    }, function (cited) { sources = cited; }).then(function () {
      if (sources && sources.length && answer) sourceList(sources);
      if (written) announcer.textContent = 'Assistant: ' + written;
    }, function (error) {
      say(error.message, true);
      announcer.textContent = error.message;
    }).then(function () {
      busy = false;
      send.disabled = false;
      log.removeAttribute('aria-busy');
      input.focus();
    });
  });

  configure(config);
  if (!api) {
    // The preview shows the open panel, without taking the focus from the settings form.
    panel.hidden = false;
    launcher.setAttribute('aria-expanded', 'true');
  }
}

/** Reads `data:` frames of a Server-Sent Events body, calling onDelta for each `{"delta"}` and onSources for `{"sources"}`. */
function readEvents(response, onDelta, onSources) {
  var reader = response.body.getReader();
  var decoder = new TextDecoder();
  var pending = '';
  function frame(line) {
    if (line.indexOf('data: ') !== 0 || line === 'data: [DONE]') return;
    var event = JSON.parse(line.slice(6));
    if (event.error) throw new Error(event.error.message);
    if (event.delta) onDelta(event.delta);
    if (event.sources && onSources) onSources(event.sources);
  }
  function next() {
    return reader.read().then(function (chunk) {
      if (chunk.done) return frame(pending.trim());
      pending += decoder.decode(chunk.value, { stream: true });
      var lines = pending.split('\n');
      pending = lines.pop();
      lines.forEach(function (line) { frame(line.trim()); });
      return next();
    });
  }
  return next();
}

/** The widget's endpoints, with the message of a JSON error as the Error's. */
function Api(base, widgetId) {
  var key = VISITOR_KEY + ':' + widgetId;
  var token = null;
  var asking = null;
  try {
    token = localStorage.getItem(key);
  } catch { /* storage blocked: this page load only */ }
  if (!/^vt_[\w.-]+$/.test(token || '')) token = null;
  function failure(response) {
    return response.json().then(function (body) {
      return new Error((body && body.error && body.error.message) || 'Something went wrong.');
    }, function () { return new Error('Something went wrong (' + response.status + ').'); });
  }
  function json(response) {
    return response.ok ? response.json() : failure(response).then(function (e) { throw e; });
  }
  var offline = function () { throw new Error('The chat could not be reached. Check your connection and try again.'); };
  /** The visitor token; asked for when there is none, or `renew`ed (with the old one, so that the visitor keeps their conversation). */
  function visitor(renew) {
    if (token && !renew) return Promise.resolve(token);
    asking = asking || fetch(base + '/visitors', {
      method: 'POST',
      credentials: 'omit',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(token ? { visitor: token } : {}),
    }).then(json, offline).then(function (body) {
      token = body.visitor;
      try {
        localStorage.setItem(key, token);
      } catch { /* idem */ }
      return token;
    }).finally(function () { asking = null; });
    return asking;
  }
  /** `call(token)`, once more with a renewed token when the service no longer takes this one (401). */
  function asVisitor(call) {
    return visitor(false).then(call).then(function (response) {
      return response.status === 401 ? visitor(true).then(call) : response;
    });
  }
  var query = function (t) { return '/conversation?visitor=' + encodeURIComponent(t); };
  this.transcript = function () {
    return asVisitor(function (t) { return fetch(base + query(t), { credentials: 'omit' }); }).then(json);
  };
  this.restart = function () {
    return asVisitor(function (t) { return fetch(base + query(t), { method: 'DELETE', credentials: 'omit' }); }).then(function (r) { if (!r.ok) throw new Error(); });
  };
  this.send = function (message, onDelta, onSources) {
    return asVisitor(function (t) {
      return fetch(base + '/messages', {
        method: 'POST',
        credentials: 'omit',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ visitor: t, message: message }),
      }).then(null, offline);
    }).then(function (response) {
      if (!response.ok) return failure(response).then(function (e) { throw e; });
      return readEvents(response, onDelta, onSources);
    });
  };
}

function start() {
  if (previewSource) {
    var into = document.getElementById(previewSource);
    if (!into) return;
    var preview = new Widget(mount(into), JSON.parse(into.getAttribute('data-config')), null);
    document.addEventListener('acs-widget-preview', function (event) { preview.configure(event.detail); });
    return;
  }
  if (!widgetId || !/^wgt_[A-Za-z0-9_-]{20}$/.test(widgetId)) return;
  var base = script.src.replace(/widget\.js(\?.*)?$/, '') + 'widget/v1/' + widgetId;
  // Inside .acs, as the widget itself: the host's reset (`all: initial`) leaves the browser's serif otherwise.
  function notice(text) {
    var box = el('div', { class: 'acs' });
    box.appendChild(el('p', { class: 'notice', role: 'status' }, text));
    mount(null).appendChild(box);
  }
  fetch(base + '/config', { credentials: 'omit' }).then(function (response) {
    // Turned off by its owner: nothing to show. Its workspace suspended: the service's message for visitors.
    if (!response.ok) {
      return response.json().then(function (body) {
        var error = body && body.error;
        if (error && error.code === 'workspace_suspended' && typeof error.message === 'string') notice(error.message);
      }, function () { /* not JSON: nothing to show */ });
    }
    return response.json().then(function (config) {
      new Widget(mount(null), config, new Api(base, widgetId));
    });
  }, function () {
    // Refused (this site is not one of the widget's origins), or the service is unreachable.
    notice('This chat is not available on this website.');
  });
}

if (script) {
  if (document.body) start();
  else document.addEventListener('DOMContentLoaded', start);
}
