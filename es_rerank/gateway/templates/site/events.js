// es-rerank: reports what this page showed and which result was clicked to POST /_esrr/events (docs/learning.md).
// Nothing but a random id for this browser tab (sessionStorage, no cookie), the query, the shown ids and the click.
(function () {
  "use strict";
  var list = document.getElementById("esrr-results");
  if (!list || !navigator.sendBeacon || !window.crypto) { return; }
  var endpoint = list.getAttribute("data-esrr-events");
  var impression = list.getAttribute("data-esrr-impression");
  var first = Number(list.getAttribute("start"));
  var ids = JSON.parse(list.getAttribute("data-esrr-ids"));
  var items = Array.prototype.slice.call(list.querySelectorAll("li.result"));
  function randomId() {
    var bytes = new Uint8Array(16);
    window.crypto.getRandomValues(bytes);
    return Array.prototype.map.call(bytes, function (b) { return (b + 256).toString(16).slice(1); }).join("");
  }
  var session = null;
  try {
    session = window.sessionStorage.getItem("esrr-session");
    if (!session) { session = randomId(); window.sessionStorage.setItem("esrr-session", session); }
  } catch (blocked) { session = randomId(); }  // storage off: one session per page
  function send(event) { navigator.sendBeacon(endpoint, JSON.stringify(event)); }
  var arm = list.getAttribute("data-esrr-arm");  // an interleaved page (ESRR_EXPERIMENT): each result's team
  var teams = arm ? JSON.parse(list.getAttribute("data-esrr-teams")) : [];
  var impressionEvent = {type: "impression", impression_id: impression, session_id: session,
        query: list.getAttribute("data-esrr-query"), ranker: list.getAttribute("data-esrr-ranker"),
        results: ids.map(function (id, index) {
          var shown = {id: id, position: first + index};
          if (teams[index]) { shown.team = teams[index]; }
          return shown;
        })};
  if (arm) { impressionEvent.arm = arm; }
  send(impressionEvent);
  function clicked(event) {
    var link = event.target.closest && event.target.closest("a[href]");
    var index = link ? items.indexOf(link.closest("li.result")) : -1;
    if (index < 0 || index >= ids.length) { return; }
    send({type: "click", impression_id: impression, session_id: session, id: ids[index], position: first + index});
  }
  list.addEventListener("click", clicked);
  list.addEventListener("auxclick", clicked);  // a middle click opens a tab: a click too
}());
