/* A stand-in for Web Workers on pages opened from the disk (file://), where browsers refuse to
   start a worker from a file: the worker's script runs in a hidden iframe of the page, and
   messages pass between the two as events. The site's search runs its index in a worker; with
   this, it searches offline too. Served over http(s), the browser's own Worker is left alone.
   (The file name holds "iframe-worker" so that the theme's offline plugin, which otherwise
   adds such a shim from a CDN, leaves it out: the site loads nothing from the network.) */
(function () {
  "use strict";
  if (window.location.protocol !== "file:") {
    return;
  }

  function FileWorker(url) {
    var target = new EventTarget();
    var worker = this;
    var pending = [];
    var scope = null;
    this.onmessage = null;
    this.onerror = null;

    this.addEventListener = target.addEventListener.bind(target);
    this.removeEventListener = target.removeEventListener.bind(target);
    this.dispatchEvent = target.dispatchEvent.bind(target);

    function toPage(data) {
      var event = new MessageEvent("message", { data: data });
      if (typeof worker.onmessage === "function") {
        worker.onmessage(event);
      }
      target.dispatchEvent(event);
    }

    function toWorker(data) {
      scope.dispatchEvent(new scope.MessageEvent("message", { data: data }));
    }

    var frame = document.createElement("iframe");
    frame.style.display = "none";
    frame.setAttribute("aria-hidden", "true");
    frame.setAttribute("tabindex", "-1");
    document.body.appendChild(frame);
    var inner = frame.contentWindow;
    inner.postMessage = function (data) {
      setTimeout(function () { toPage(data); }, 0);
    };
    inner.close = function () {};
    var script = inner.document.createElement("script");
    script.src = new URL(url, document.baseURI).href;
    script.onload = function () {
      scope = inner;
      pending.splice(0).forEach(toWorker);
    };
    script.onerror = function () {
      var event = new ErrorEvent("error", { message: "could not load " + script.src });
      if (typeof worker.onerror === "function") {
        worker.onerror(event);
      }
      target.dispatchEvent(event);
    };
    inner.document.head.appendChild(script);

    this.postMessage = function (data) {
      if (scope === null) {
        pending.push(data);
      } else {
        setTimeout(function () { toWorker(data); }, 0);
      }
    };
    this.terminate = function () {
      frame.remove();
    };
  }

  window.Worker = FileWorker;
})();
