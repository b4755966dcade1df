// The usage page's chart, drawn with uPlot from the table of daily numbers on the same page
// (#daily-table): the chart shows exactly what the table says, and without script the table
// is still there. Requests are bars on the left axis, cost in dollars a line on the right.
(function () {
  'use strict';
  var target = document.getElementById('usage-chart');
  var rows = document.querySelectorAll('#daily-table tbody tr[data-date]');
  if (!target || !window.uPlot || rows.length === 0) return;

  var days = Array.prototype.map.call(rows, function (row) {
    return {
      x: Date.parse(row.getAttribute('data-date') + 'T00:00:00Z') / 1000,
      requests: Number(row.getAttribute('data-requests')),
      // Millicents to dollars, for the axis only: the table keeps the exact amounts.
      dollars: Number(row.getAttribute('data-cost')) / 100000,
    };
  }).sort(function (a, b) { return a.x - b.x; });

  var data = [
    days.map(function (d) { return d.x; }),
    days.map(function (d) { return d.requests; }),
    days.map(function (d) { return d.dollars; }),
  ];

  function size() {
    return { width: Math.max(target.clientWidth, 280), height: 260 };
  }

  var bars = window.uPlot.paths && window.uPlot.paths.bars ? window.uPlot.paths.bars({ size: [0.6, 40] }) : undefined;
  var chart = new window.uPlot({
    width: size().width,
    height: size().height,
    tzDate: function (ts) { return window.uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'); },
    scales: { x: { time: true }, requests: { range: function (u, min, max) { return [0, Math.max(1, max)]; } }, dollars: {} },
    series: [
      { label: 'Day (UTC)' },
      { label: 'Requests', scale: 'requests', stroke: '#1565c0', fill: 'rgba(21, 101, 192, 0.25)', paths: bars, points: { show: false } },
      {
        label: 'Cost ($)', scale: 'dollars', stroke: '#c62828', width: 2,
        value: function (u, v) { return v === null ? '' : '$' + v.toFixed(5).replace(/0{1,3}$/, ''); },
      },
    ],
    axes: [
      {},
      { scale: 'requests', label: 'Requests' },
      { scale: 'dollars', side: 1, label: 'Cost ($)', grid: { show: false } },
    ],
  }, data, target);

  var pending;
  window.addEventListener('resize', function () {
    clearTimeout(pending);
    pending = setTimeout(function () { chart.setSize(size()); }, 100);
  });
})();
