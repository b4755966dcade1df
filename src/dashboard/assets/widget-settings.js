// The widget page: the preview (the real widget.js, in preview mode) follows the form as it
// changes, through an `acs-widget-preview` event with the whole configuration. Branding is
// the server's to decide: it is kept as the page drew it.
(function () {
  'use strict';
  var preview = document.getElementById('widget-preview');
  var form = document.getElementById('widget-form');
  if (!preview || !form) return;
  var config = JSON.parse(preview.getAttribute('data-config'));
  function update() {
    form.querySelectorAll('[data-preview-field]').forEach(function (field) {
      config[field.getAttribute('data-preview-field')] = field.value;
    });
    document.dispatchEvent(new CustomEvent('acs-widget-preview', { detail: config }));
  }
  form.addEventListener('input', update);
  form.addEventListener('change', update);
})();
