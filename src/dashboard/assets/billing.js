// Billing: the step to the payment provider's hosted checkout. A form may not redirect to
// another site (CSP form-action 'self'), so the POST answers with a page holding a link to
// the checkout; this script follows it at once. Without script, the person clicks it.
(function () {
  'use strict';
  var link = document.querySelector('a[data-follow-at-once]');
  if (link) window.location.assign(link.href);
})();
