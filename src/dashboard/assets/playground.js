// The playground and transcripts: renders stored messages as Markdown (through SafeMarkdown,
// which escapes model text first), and on the playground sends a message and shows the answer
// as it streams (fetch + ReadableStream over Server-Sent Events), then its cost from x_service.
// Served as a file: the Content-Security-Policy forbids inline script.
(function () {
  'use strict';

  var markdown = window.SafeMarkdown;

  function renderMarkdownIn(root) {
    var blocks = root.querySelectorAll('[data-markdown]');
    for (var i = 0; i < blocks.length; i++) {
      if (blocks[i].getAttribute('data-rendered')) continue;
      blocks[i].innerHTML = markdown.render(blocks[i].textContent);
      blocks[i].setAttribute('data-rendered', 'true');
    }
  }
  renderMarkdownIn(document);

  var form = document.getElementById('playground-form');
  if (!form) return;
  var transcript = document.getElementById('playground-transcript');
  var messageBox = document.getElementById('playground-message');
  var sendButton = document.getElementById('playground-send');
  var targetSelect = document.getElementById('playground-target');
  var conversationSelect = document.getElementById('playground-conversation');
  var errorBox = document.getElementById('playground-error');
  var statusLine = document.getElementById('playground-status');
  var busy = false;

  // Choosing a stored conversation opens it (its transcript is rendered by the server).
  conversationSelect.addEventListener('change', function () {
    var id = conversationSelect.value;
    window.location.assign(form.getAttribute('data-page-url') + (id ? '?conversation=' + encodeURIComponent(id) : ''));
  });

  messageBox.addEventListener('keydown', function (event) {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  /** Millicents as dollars, exact to the millicent as the server writes them: $0.00021. */
  function dollars(millicents) {
    var whole = Math.round(millicents);
    var negative = whole < 0;
    var magnitude = Math.abs(whole);
    var fraction = String(magnitude % 100000);
    while (fraction.length < 5) fraction = '0' + fraction;
    fraction = fraction.replace(/0{1,3}$/, '');
    if (fraction.length < 2) fraction = (fraction + '00').slice(0, 2);
    var units = String(Math.floor(magnitude / 100000)).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
    return (negative ? '-' : '') + '$' + units + '.' + fraction;
  }

  function exactMillicents(millicents) {
    return Number.isInteger(millicents) ? String(millicents) : millicents.toFixed(6).replace(/0+$/, '');
  }

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function addMessage(role, label) {
    var empty = document.getElementById('playground-empty');
    if (empty) empty.remove();
    var article = element('article', 'message message-' + role);
    var header = element('header');
    header.appendChild(element('strong', '', label));
    article.appendChild(header);
    var body = element('div', 'md');
    article.appendChild(body);
    transcript.appendChild(article);
    return { article: article, body: body };
  }

  function showError(text) {
    errorBox.textContent = text;
    errorBox.hidden = false;
  }

  /** What a refusal says, for a person: the server's message (never a stack), with what to do. */
  function refusalText(status, body, retryAfter) {
    var message = body && body.error && body.error.message ? body.error.message : 'The request failed (HTTP ' + status + ').';
    if (status === 402) return message + ' Add credit to the workspace on the Billing page, or ask an admin.';
    if (status === 429) return message + (retryAfter ? '' : ' Wait a moment and send it again.');
    if (status === 403) return 'Your session has expired or the form is stale: reload the page and try again.';
    return message;
  }

  function setBusy(value, article) {
    busy = value;
    sendButton.disabled = value;
    sendButton.setAttribute('aria-busy', value ? 'true' : 'false');
    // Assistive technology waits for the answer to be complete before reading it.
    if (article) article.setAttribute('aria-busy', value ? 'true' : 'false');
  }

  function describeXService(x) {
    var parts = ['Cost ' + dollars(x.cost_millicents) + ' (' + exactMillicents(x.cost_millicents) + ' millicents)'];
    parts.push(x.iterations + (x.iterations === 1 ? ' iteration' : ' iterations'));
    parts.push('tools used: ' + (x.tools_used && x.tools_used.length ? x.tools_used.join(', ') : 'none'));
    return parts.join(' · ');
  }

  form.addEventListener('submit', function (event) {
    event.preventDefault();
    if (busy) return;
    var text = messageBox.value;
    if (!text.trim()) {
      showError('Write a message first.');
      messageBox.focus();
      return;
    }
    errorBox.hidden = true;
    statusLine.textContent = 'Answering…';

    var mine = addMessage('user', 'You');
    mine.body.innerHTML = markdown.render(text);
    var answer = addMessage('assistant', targetSelect.options[targetSelect.selectedIndex].getAttribute('data-label') || 'Assistant');
    answer.article.id = 'streaming-answer';
    setBusy(true, answer.article);
    var meta = element('p', 'turn-meta');
    var sources = [];
    var written = '';
    var scheduled = false;

    function paint() {
      scheduled = false;
      answer.body.innerHTML = markdown.render(written);
    }
    function append(delta) {
      written += delta;
      if (!scheduled) {
        scheduled = true;
        window.requestAnimationFrame(paint);
      }
    }

    var csrf = form.querySelector('input[name="_csrf"]').value;
    fetch(form.getAttribute('data-stream-url'), {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream', 'X-CSRF-Token': csrf },
      body: JSON.stringify({ target: targetSelect.value, message: text, conversation_id: conversationSelect.value || null }),
    })
      .then(function (response) {
        if (!response.ok || !response.body) {
          return response.json().then(
            function (body) { throw new Error(refusalText(response.status, body, response.headers.get('Retry-After'))); },
            function () { throw new Error(refusalText(response.status, null, null)); },
          );
        }
        rememberConversation(response.headers.get('X-Conversation-Id'), text);
        messageBox.value = '';
        return readEvents(response.body.getReader(), function (event) {
          if (event.error) throw new Error(event.error.message || 'The answer stopped with an error.');
          var choice = event.choices && event.choices[0];
          if (choice && choice.delta && typeof choice.delta.content === 'string') append(choice.delta.content);
          if (choice && choice.delta && Array.isArray(choice.delta.annotations)) sources = sources.concat(choice.delta.annotations);
          if (event.x_service) {
            meta.textContent = describeXService(event.x_service);
            meta.setAttribute('data-cost-millicents', String(event.x_service.cost_millicents));
          }
        });
      })
      .then(function () {
        paint();
        var list = sourceList(sources);
        if (list) answer.article.appendChild(list);
        answer.article.appendChild(meta);
        statusLine.textContent = 'Answer complete. ' + meta.textContent;
      })
      .catch(function (error) {
        paint();
        if (!written) answer.article.remove();
        showError(error.message);
        statusLine.textContent = '';
      })
      .then(function () {
        answer.article.removeAttribute('id');
        setBusy(false, answer.article);
      });
  });

  /** The sources an answer's annotations cite, as the transcript shows them (a linked title or a file name); null without any. */
  function sourceList(annotations) {
    var seen = {};
    var items = [];
    annotations.forEach(function (annotation) {
      var url = annotation.url_citation, file = annotation.file_citation;
      var key = url ? 'url:' + url.url : file ? 'file:' + file.file_id : null;
      if (!key || seen[key]) return;
      seen[key] = true;
      var item = document.createElement('li');
      if (url && /^https?:\/\//i.test(url.url)) {
        var link = document.createElement('a');
        link.href = url.url;
        link.rel = 'noopener noreferrer nofollow';
        link.target = '_blank';
        link.textContent = url.title || url.url;
        item.appendChild(link);
      } else {
        item.textContent = url ? url.title || url.url : file.filename;
      }
      items.push(item);
    });
    if (!items.length) return null;
    var box = element('div', 'sources');
    var caption = document.createElement('small');
    caption.textContent = 'Sources:';
    var list = document.createElement('ol');
    items.forEach(function (item) { list.appendChild(item); });
    box.appendChild(caption);
    box.appendChild(list);
    return box;
  }

  /** Reads `data: ...` frames until `[DONE]`, calling onEvent with each parsed event. */
  function readEvents(reader, onEvent) {
    var decoder = new TextDecoder();
    var buffer = '';
    var done = false;
    function pump() {
      return reader.read().then(function (chunk) {
        if (chunk.done) return;
        buffer += decoder.decode(chunk.value, { stream: true });
        var frames = buffer.split('\n\n');
        buffer = frames.pop();
        for (var i = 0; i < frames.length && !done; i++) {
          var data = frames[i]
            .split('\n')
            .filter(function (line) { return line.indexOf('data: ') === 0; })
            .map(function (line) { return line.slice(6); })
            .join('\n');
          if (!data) continue; // a keep-alive comment
          if (data === '[DONE]') done = true;
          else onEvent(JSON.parse(data));
        }
        return done ? reader.cancel() : pump();
      });
    }
    return pump();
  }

  /** After the first answer of a new chat, the page continues that conversation (and its URL says so). */
  function rememberConversation(id, firstMessage) {
    if (!id || conversationSelect.value === id) return;
    var option = element('option', '', firstMessage.trim().split('\n')[0].slice(0, 80));
    option.value = id;
    conversationSelect.insertBefore(option, conversationSelect.options[1] || null);
    conversationSelect.value = id;
    document.getElementById('transcript-heading').textContent = option.textContent;
    window.history.replaceState(null, '', form.getAttribute('data-page-url') + '?conversation=' + encodeURIComponent(id));
  }
})();
