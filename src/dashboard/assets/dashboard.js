// The dashboard's own script: progressive enhancements only; every page works without it.
// Served as a file because the Content-Security-Policy forbids inline script.
(function () {
  'use strict';

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
