// The assistants' pages: progressive enhancements only (every form works without them).
// Served as a file because the Content-Security-Policy forbids inline script.
(function () {
  'use strict';

  // The slug of a new assistant follows its name until someone types a slug of their own.
  // Same rule as the server's slugify(): accents dropped, lowercase, words joined by hyphens.
  function slugify(name) {
    var slug = name.normalize('NFKD').replace(/[\u0300-\u036f]/g, '').toLowerCase()
      .replace(/[^a-z0-9]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 64).replace(/-+$/g, '');
    return slug;
  }
  var slugInput = document.querySelector('[data-slug-from]');
  if (slugInput) {
    var nameInput = document.getElementById(slugInput.getAttribute('data-slug-from'));
    var suggested = slugInput.value === '' ? '' : null;
    slugInput.addEventListener('input', function () { suggested = slugInput.value === '' ? '' : null; });
    if (nameInput) {
      nameInput.addEventListener('input', function () {
        if (suggested === null) return;
        suggested = slugify(nameInput.value);
        slugInput.value = suggested;
      });
    }
  }

  // Uploads with a progress bar: the same multipart POST the form makes, through XHR, whose
  // answer is the documents panel's new HTML (htmx then polls it while files are processing).
  var form = document.getElementById('upload-form');
  if (!form || !window.FormData || !window.XMLHttpRequest) return;
  var progress = document.getElementById('upload-progress');
  var status = document.getElementById('upload-status');
  var button = document.getElementById('upload-button');
  form.addEventListener('submit', function (event) {
    event.preventDefault();
    var files = document.getElementById('upload-files').files;
    var data = new FormData(form);
    var xhr = new XMLHttpRequest();
    xhr.open('POST', form.action);
    xhr.setRequestHeader('X-Requested-With', 'XMLHttpRequest');
    xhr.setRequestHeader('X-CSRF-Token', form.querySelector('[name="_csrf"]').value);
    progress.value = 0;
    progress.hidden = false;
    button.disabled = true;
    status.textContent = 'Uploading ' + files.length + ' file' + (files.length === 1 ? '' : 's') + '…';
    xhr.upload.addEventListener('progress', function (e) {
      if (e.lengthComputable) progress.value = Math.round((e.loaded / e.total) * 100);
    });
    xhr.addEventListener('load', function () {
      button.disabled = false;
      progress.hidden = true;
      var panel = document.getElementById(form.getAttribute('data-upload-panel'));
      if (xhr.responseText.indexOf('id="documents-panel"') < 0 || !panel) {
        // Not the panel (the session ended, a server error): show whatever page it is.
        window.location.assign(xhr.responseURL || window.location.href);
        return;
      }
      var holder = document.createElement('div');
      holder.innerHTML = xhr.responseText;
      var fresh = holder.firstElementChild;
      panel.replaceWith(fresh);
      if (window.htmx) window.htmx.process(fresh);
      status.textContent = xhr.status < 400 ? 'Uploaded: the list below shows each file being read.' : 'Nothing was uploaded: see the messages above the list.';
      if (xhr.status < 400) form.reset();
    });
    xhr.addEventListener('error', function () {
      button.disabled = false;
      progress.hidden = true;
      status.textContent = 'The upload failed (the connection was lost). Try again.';
    });
    xhr.send(data);
  });
})();
