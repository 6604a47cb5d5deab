;;; fastrevert-remote-relay.el --- A TCP relay on loopback that adds delay -*- lexical-binding: t; -*-

;;; Commentary:

;; The machines the tests run on have no network emulation (their
;; kernels have no queueing disciplines), so a delay comes from this
;; relay, run in an Emacs of its own:
;;
;;   emacs -Q --batch -l fastrevert-remote-relay.el \
;;     -f fastrevert-remote-relay-main DELAY-MS CONTROL-FILE FROM:TO...
;;
;; It listens on each port FROM of 127.0.0.1 and joins each connection
;; made there to port TO.  Each chunk read from either side is passed
;; on DELAY-MS milliseconds later, in the order it came: a round trip
;; takes twice DELAY-MS more.  While CONTROL-FILE exists nothing is
;; passed on (a host that does not answer); the chunks wait, in order.

;;; Code:

(require 'cl-lib)

(defvar fastrevert-remote-relay--delay 0.025
  "Seconds each chunk is held.")

(defvar fastrevert-remote-relay--control nil
  "The file whose existence freezes the relay.")

(defvar fastrevert-remote-relay--busy nil
  "The processes with chunks waiting to be passed on to them.")

(defun fastrevert-remote-relay--enqueue (to item)
  "Pass ITEM on to the process TO after the delay, after those before it.
ITEM is a string of bytes, or the symbol `close'."
  (process-put to 'queue (nconc (process-get to 'queue)
                                (list (cons (+ (float-time) fastrevert-remote-relay--delay) item))))
  (unless (memq to fastrevert-remote-relay--busy)
    (push to fastrevert-remote-relay--busy)))

(defun fastrevert-remote-relay--pass (to)
  "Pass on what is due in the queue of TO, in order."
  (let ((queue (process-get to 'queue)))
    (while (and queue (<= (caar queue) (float-time)))
      (let ((item (cdr (pop queue))))
        (if (eq item 'close)
            (progn (setq queue nil) (delete-process to))
          (when (process-live-p to)
            (condition-case nil
                (process-send-string to item)
              (error (setq queue nil) (delete-process to)))))))
    (process-put to 'queue queue)
    queue))

(defun fastrevert-remote-relay--run ()
  "Pass on every chunk that is due; return seconds until the next one is."
  (if (file-exists-p fastrevert-remote-relay--control)
      0.05
    (let ((next 1.0))
      (setq fastrevert-remote-relay--busy
            (cl-remove-if-not (lambda (to)
                                (let ((queue (fastrevert-remote-relay--pass to)))
                                  (when queue
                                    (setq next (min next (- (caar queue) (float-time)))))
                                  queue))
                              fastrevert-remote-relay--busy))
      (max 0.0005 next))))

(defun fastrevert-remote-relay--filter (process bytes)
  "Pass BYTES read from PROCESS on to its peer."
  (let ((peer (process-get process 'peer)))
    (when peer (fastrevert-remote-relay--enqueue peer bytes))))

(defun fastrevert-remote-relay--sentinel (process _event)
  "Close the peer of PROCESS, once what it sent has been passed on."
  (unless (process-live-p process)
    (let ((peer (process-get process 'peer)))
      (when (and peer (process-live-p peer))
        (fastrevert-remote-relay--enqueue peer 'close)))))

(defun fastrevert-remote-relay--accept (server client _message)
  "Join CLIENT, just accepted by SERVER, to the server's target port."
  (condition-case nil
      (let ((upstream (make-network-process
                       :name "relay-upstream" :host "127.0.0.1"
                       :service (process-get server 'target) :coding 'binary :noquery t
                       :nodelay t
                       :filter #'fastrevert-remote-relay--filter
                       :sentinel #'fastrevert-remote-relay--sentinel)))
        (set-process-coding-system client 'binary 'binary)
        (process-put upstream 'peer client)
        (process-put client 'peer upstream))
    (file-error (delete-process client))))

(defun fastrevert-remote-relay-main ()
  "Run the relay with the arguments left on the command line, until killed."
  (let ((args command-line-args-left))
    (setq command-line-args-left nil
          fastrevert-remote-relay--delay (/ (string-to-number (pop args)) 1000.0)
          fastrevert-remote-relay--control (pop args))
    (dolist (pair args)
      (let* ((ports (split-string pair ":"))
             (server (make-network-process
                      :name "relay-server" :server t :host "127.0.0.1"
                      :service (string-to-number (car ports)) :family 'ipv4
                      :coding 'binary :noquery t :nodelay t
                      :filter #'fastrevert-remote-relay--filter
                      :sentinel #'fastrevert-remote-relay--sentinel
                      :log #'fastrevert-remote-relay--accept)))
        (process-put server 'target (string-to-number (cadr ports)))))
    (princ "ready\n")
    ;; A chunk read wakes the wait (a filter queues it), so that each wait
    ;; lasts until the next chunk is due, or until one arrives.
    (while t
      (accept-process-output nil (fastrevert-remote-relay--run)))))

(provide 'fastrevert-remote-relay)

;;; fastrevert-remote-relay.el ends here
