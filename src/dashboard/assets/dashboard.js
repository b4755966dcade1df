// The dashboard's own script: progressive enhancements only; every page works without it.
// Served as a file because the Content-Security-Policy forbids inline script.
(function () {
  'use strict';

  // Disclosure menus (the workspace switcher): <li data-disclosure><button aria-expanded aria-controls>
  // and the list it shows. Enter, Space or a click toggle it; Escape or a click elsewhere closes it.
  document.documentElement.classList.add('js');
  function setExpanded(toggle, open) {
    toggle.setAttribute('aria-expanded', open ? 'true' : 'false');
  }
  document.addEventListener('click', function (event) {
    var toggle = event.target.closest && event.target.closest('[data-disclosure] > button[aria-expanded]');
    document.querySelectorAll('[data-disclosure] > button[aria-expanded="true"]').forEach(function (open) {
      if (open !== toggle && !open.parentNode.contains(event.target)) setExpanded(open, false);
    });
    if (toggle) setExpanded(toggle, toggle.getAttribute('aria-expanded') !== 'true');
  });
  document.addEventListener('keydown', function (event) {
    if (event.key !== 'Escape') return;
    var container = event.target.closest && event.target.closest('[data-disclosure]');
    var toggle = container && container.querySelector('button[aria-expanded="true"]');
    if (!toggle) return;
    setExpanded(toggle, false);
    toggle.focus();
  });

  // Copy buttons: <button data-copy="element-id">Copy</button>
  document.addEventListener('click', function (event) {
    var button = event.target.closest && event.target.closest('[data-copy]');
    if (!button) return;
    var source = document.getElementById(button.getAttribute('data-copy'));
    if (!source || !navigator.clipboard) return;
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      var label = button.textContent;
      button.textContent = 'Copied';
      setTimeout(function () { button.textContent = label; }, 1500);
    });
  });

  // Forms that ask first: <form data-confirm="Revoke this key?">
  document.addEventListener('submit', function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute('data-confirm');
    if (question && !window.confirm(question)) {
      event.preventDefault();
      // htmx ignores defaultPrevented: a declined hx-post form must not see the event at all.
      event.stopPropagation();
    }
  }, true);

  // Dialogs: <button data-open-dialog="id"> and <button data-close-dialog>
  document.addEventListener('click', function (event) {
    var opener = event.target.closest && event.target.closest('[data-open-dialog]');
    if (opener) {
      var dialog = document.getElementById(opener.getAttribute('data-open-dialog'));
      if (dialog && dialog.showModal) dialog.showModal();
      return;
    }
    var closer = event.target.closest && event.target.closest('[data-close-dialog]');
    if (closer) {
      var open = closer.closest('dialog');
      if (open) open.close();
    }
  });
})();
