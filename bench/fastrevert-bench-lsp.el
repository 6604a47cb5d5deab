;;; fastrevert-bench-lsp.el --- Language servers, stock and carried  -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; Keywords: processes, languages

;;; Commentary:

;; The LSP table of `make bench': eglot and lsp-mode with Debian's clangd
;; on a generated project, each request made by a stock connection and
;; by one that `fastrevert-lsp-mode' carries, in turns, the first of
;; each pair alternating.  Two copies of the project each get a server
;; of their own, so both stay warm.
;;
;; The requests are those whose replies users wait for: the symbols of a
;; file of 20,000 functions (`textDocument/documentSymbol', some 5 MB of
;; JSON) and a completion at global scope after `#include
;; <bits/stdc++.h>' (clangd's `--limit-results=0', some 5 MB).  Each is
;; made as the client makes it (`jsonrpc-request', `lsp-request'), which
;; waits as the client waits.  For each the table gives the wall time
;; until the reply was handled, the main thread's processor time (its
;; schedstat) per MB of reply, and the longest gap between two runs of a
;; 10 ms repeating timer meanwhile: how long Emacs could not run a timer
;; (or redisplay, or read a key).  Medians of the rounds.
;;
;; Two more rows: the round trip of 1,000 hover requests (medians of 7
;; rounds: a round is short, and one garbage collection more or less
;; decides it), where an extra hop would show; and a stand-in server that
;; writes 50 MB of notifications while Emacs is busy for 2 s, with how
;; long its writes took (stock: until Emacs reads again).

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'fastrevert-bench)
(require 'fastrevert-bench-workload)

(declare-function fastrevert-lsp-mode "fastrevert-lsp" (&optional arg))
(declare-function fastrevert-lsp--link "fastrevert-lsp" (process))
(declare-function eglot--connect "eglot")
(declare-function eglot--guess-contact "eglot" (&optional interactive))
(declare-function eglot--TextDocumentPositionParams "eglot" ())
(declare-function eglot--TextDocumentIdentifier "eglot" ())
(declare-function eglot-shutdown "eglot" (server &optional interactive timeout preserve-buffers))
(declare-function jsonrpc--process "jsonrpc" (connection))
(declare-function jsonrpc-request "jsonrpc" (connection method params &rest args))
(declare-function jsonrpc-notify "jsonrpc" (connection method params))
(declare-function jsonrpc-shutdown "jsonrpc" (connection &optional cleanup))
(declare-function lsp "lsp-mode" (&optional arg))
(declare-function lsp-request "lsp-mode" (method params &rest args))
(declare-function lsp--workspace-status "lsp-mode" (workspace))
(declare-function lsp--workspace-proc "lsp-mode" (workspace))
(declare-function lsp--text-document-position-params "lsp-mode" (&optional identifier position))
(declare-function lsp--text-document-identifier "lsp-mode" ())
(declare-function lsp-workspace-shutdown "lsp-mode" (workspace))
(defvar eglot-server-programs)
(defvar eglot-events-buffer-size)
(defvar eglot-autoreconnect)
(defvar lsp-session-file)
(defvar lsp-auto-guess-root)
(defvar lsp-enable-snippet)
(defvar lsp-keep-workspace-alive)
(defvar lsp-restart)
(defvar lsp-log-io)
(defvar lsp-clients-clangd-args)
(defvar lsp--buffer-workspaces)
(defvar lsp-enable-file-watchers)
(defvar lsp-headerline-breadcrumb-enable)
(defvar lsp-response-timeout)

(defconst fastrevert-bench-lsp--sizes
  '((:functions 20000 2000)
    (:rounds 3 1)
    (:hovers 1000 50)
    (:hover-rounds 7 1)
    (:flood-messages 800 80)
    (:busy-seconds 2.0 0.5))
  "Sizes as (KEY DEFAULT QUICK).")

(defun fastrevert-bench-lsp--size (key)
  "Return the size KEY of this section for this run."
  (fastrevert-bench-size key fastrevert-bench-lsp--sizes))

(defconst fastrevert-bench-lsp--stand-in
  (expand-file-name "../test/tools/lsp-stand-in.sh"
                    (file-name-directory (or load-file-name buffer-file-name)))
  "The stand-in server of the flood row.")

;;;; The project

(defun fastrevert-bench-lsp--write-project (dir functions)
  "Make DIR a Git project with big.cpp (FUNCTIONS functions) and complete.cpp."
  (make-directory dir t)
  (let ((default-directory dir))
    (call-process "git" nil nil nil "init" "-q" ".")
    (with-temp-file "compile_flags.txt" (insert "-std=c++17\n"))
    (with-temp-file "big.cpp"
      (dotimes (i functions)
        (insert (format "int function_%d(int value_%d, int other) { return value_%d * %d + other; }\n"
                        i i i (1+ (% i 97))))))
    (with-temp-file "complete.cpp"
      (insert "#include <bits/stdc++.h>\n\n\nint main() { return 0; }\n"))))

(defun fastrevert-bench-lsp--measure (process thunk)
  "Call THUNK, which waits for a reply from PROCESS's server; return its costs.
The value is a plist: :wall seconds, :main the main thread's
processor seconds, :bytes of output the client's filter got, :gap the
longest seconds between two runs of a 10 ms timer."
  (let* ((bytes 0)
         (count (lambda (_process string) (setq bytes (+ bytes (string-bytes string)))))
         (last (float-time))
         (gap 0.0)
         (timer (run-at-time 0.01 0.01
                             (lambda ()
                               (let ((now (float-time)))
                                 (setq gap (max gap (- now last))
                                       last now)))))
         (start (float-time))
         (main (fastrevert-bench-workload--main-thread-seconds)))
    (add-function :before (process-filter process) count)
    (unwind-protect
        (progn
          (setq last (float-time))
          (funcall thunk)
          (let ((now (float-time)))
            (setq gap (max gap (- now last))))
          (list :wall (- (float-time) start)
                :main (- (fastrevert-bench-workload--main-thread-seconds) main)
                :bytes bytes
                :gap gap))
      (cancel-timer timer)
      (remove-function (process-filter process) count))))

;;;; The clients

(defun fastrevert-bench-lsp--goto (text offset)
  "Move point to OFFSET characters after the start of the first TEXT."
  (goto-char (point-min))
  (search-forward text)
  (goto-char (+ (match-beginning 0) offset)))

(defun fastrevert-bench-lsp--eglot (dir)
  "Connect eglot to clangd for DIR; return a plist of what the rows call."
  (let* ((eglot-server-programs '((c++-mode . ("clangd" "--limit-results=0"))))
         (big (find-file-noselect (expand-file-name "big.cpp" dir)))
         (complete (find-file-noselect (expand-file-name "complete.cpp" dir)))
         (server (progn
                   ;; Both buffers are in the mode before the server
                   ;; starts, so that it manages both.
                   (with-current-buffer complete (c++-mode))
                   (with-current-buffer big
                     (c++-mode)
                     (apply #'eglot--connect (eglot--guess-contact))))))
    (list :process (jsonrpc--process server)
          :symbols (lambda ()
                     (with-current-buffer big
                       (jsonrpc-request server :textDocument/documentSymbol
                                        `(:textDocument ,(eglot--TextDocumentIdentifier))
                                        :timeout 600)))
          :complete (lambda ()
                      (with-current-buffer complete
                        (fastrevert-bench-lsp--goto "\n\n\nint" 2)
                        (jsonrpc-request server :textDocument/completion
                                         (eglot--TextDocumentPositionParams) :timeout 600)))
          :hover (lambda ()
                   (with-current-buffer big
                     (fastrevert-bench-lsp--goto "function_1(" 3)
                     (jsonrpc-request server :textDocument/hover
                                      (eglot--TextDocumentPositionParams))))
          :close (lambda ()
                   (eglot-shutdown server)
                   (dolist (buffer (list big complete))
                     (with-current-buffer buffer (set-buffer-modified-p nil))
                     (kill-buffer buffer))))))

(defun fastrevert-bench-lsp--lsp-mode (dir)
  "Connect lsp-mode to clangd for DIR; return a plist of what the rows call."
  (let* ((lsp-clients-clangd-args '("--limit-results=0"))
         (complete (find-file-noselect (expand-file-name "complete.cpp" dir)))
         (big (find-file-noselect (expand-file-name "big.cpp" dir)))
         workspace)
    (with-current-buffer big
      (c++-mode)
      (lsp)
      (let ((deadline (+ (float-time) 120)))
        (while (and (not (setq workspace
                               (let ((found (car lsp--buffer-workspaces)))
                                 (and found (eq (lsp--workspace-status found) 'initialized)
                                      found))))
                    (< (float-time) deadline))
          (accept-process-output nil 0.05))))
    (unless workspace (error "The lsp-mode client did not connect to clangd"))
    (with-current-buffer complete (c++-mode) (lsp))
    (list :process (lsp--workspace-proc workspace)
          :symbols (lambda ()
                     (with-current-buffer big
                       (lsp-request "textDocument/documentSymbol"
                                    `(:textDocument ,(lsp--text-document-identifier)))))
          :complete (lambda ()
                      (with-current-buffer complete
                        (fastrevert-bench-lsp--goto "\n\n\nint" 2)
                        (lsp-request "textDocument/completion"
                                     (lsp--text-document-position-params))))
          :hover (lambda ()
                   (with-current-buffer big
                     (fastrevert-bench-lsp--goto "function_1(" 3)
                     (lsp-request "textDocument/hover" (lsp--text-document-position-params))))
          :close (lambda ()
                   (lsp-workspace-shutdown workspace)
                   (dolist (buffer (list big complete))
                     (with-current-buffer buffer (set-buffer-modified-p nil))
                     (kill-buffer buffer))))))

(defun fastrevert-bench-lsp--connect (connect dir carried)
  "Call CONNECT on DIR with `fastrevert-lsp-mode' on if CARRIED; return its plist."
  (fastrevert-lsp-mode (if carried 1 -1))
  (unwind-protect
      (let ((session (funcall connect dir)))
        (unless (eq (and (fastrevert-lsp--link (plist-get session :process)) t) carried)
          (error "The %s server is not %s" (if carried "carried" "stock")
                 (if carried "carried" "stock")))
        session)
    (fastrevert-lsp-mode -1)))

;;;; Rows

(defun fastrevert-bench-lsp--pairs (stock carried key rounds)
  "Make request KEY of sessions STOCK and CARRIED, ROUNDS times each, alternating.
Return (STOCK-COSTS . CARRIED-COSTS), lists of the plists of
`fastrevert-bench-lsp--measure'.  A first call of each warms its
server and is not counted."
  (funcall (plist-get stock key))
  (funcall (plist-get carried key))
  (let (stock-costs carried-costs)
    (dotimes (round rounds)
      (dolist (carried-first (if (cl-evenp round) '(nil t) '(t nil)))
        (let ((session (if carried-first carried stock)))
          (garbage-collect)
          (push (fastrevert-bench-lsp--measure (plist-get session :process)
                                               (plist-get session key))
                (if carried-first carried-costs stock-costs)))))
    (cons stock-costs carried-costs)))

(defun fastrevert-bench-lsp--median (costs key)
  "Return the median of KEY over COSTS."
  (fastrevert-bench-median (mapcar (lambda (cost) (plist-get cost key)) costs)))

(defun fastrevert-bench-lsp--row (label stock-costs carried-costs)
  "Return the table row LABEL for STOCK-COSTS and CARRIED-COSTS.
Both sides' time per MB is per MB of the reply as the server wrote
it, which stock's filter counts: a carried filter may get the reply
printed as Lisp, or only the line that names the file holding it."
  (let* ((mb (/ (fastrevert-bench-lsp--median stock-costs :bytes) 1e6))
         (per-mb (lambda (costs)
                   (* 1000 (/ (fastrevert-bench-lsp--median costs :main) (max mb 1e-6)))))
         (stock-wall (fastrevert-bench-lsp--median stock-costs :wall))
         (carried-wall (fastrevert-bench-lsp--median carried-costs :wall)))
    (list label
          (format "%.2f" mb)
          (format "%.0f" (* 1000 stock-wall))
          (format "%.0f" (* 1000 carried-wall))
          (format "%.2f" (/ stock-wall carried-wall))
          (format "%.0f" (funcall per-mb stock-costs))
          (format "%.0f" (funcall per-mb carried-costs))
          (format "%.0f" (* 1000 (fastrevert-bench-lsp--median stock-costs :gap)))
          (format "%.0f" (* 1000 (fastrevert-bench-lsp--median carried-costs :gap))))))

(defun fastrevert-bench-lsp--with-hovers (session count)
  "Return SESSION with a request :hovers, COUNT hover requests in a row."
  (append (list :hovers (lambda () (dotimes (_ count) (funcall (plist-get session :hover)))))
          session))

(defun fastrevert-bench-lsp--hover-row (label stock carried count)
  "Return the row LABEL for COUNT hovers of sessions STOCK and CARRIED.
The rounds alternate which goes first, after a garbage collection, as
the other rows' do; each column is its median round's."
  (let* ((costs (fastrevert-bench-lsp--pairs
                 (fastrevert-bench-lsp--with-hovers stock count)
                 (fastrevert-bench-lsp--with-hovers carried count)
                 :hovers (fastrevert-bench-lsp--size :hover-rounds)))
         (stock-costs (car costs))
         (carried-costs (cdr costs))
         (ms (lambda (costs key) (* 1000 (fastrevert-bench-lsp--median costs key)))))
    (list label "-"
          (format "%.0f" (funcall ms stock-costs :wall))
          (format "%.0f" (funcall ms carried-costs :wall))
          (format "%.2f" (/ (funcall ms stock-costs :wall) (funcall ms carried-costs :wall)))
          (format "%.0f main" (funcall ms stock-costs :main))
          (format "%.0f main" (funcall ms carried-costs :main))
          (format "%.0f" (funcall ms stock-costs :gap))
          (format "%.0f" (funcall ms carried-costs :gap)))))

(defun fastrevert-bench-lsp--flood (dir carried)
  "Time the stand-in's 50 MB of notifications while Emacs is busy.
With CARRIED, `fastrevert-lsp-mode' carries it.  Return (WRITE-SECONDS
. HANDLED-SECONDS): how long the server took to write them, and how
long until the client had handled them all, from the start of the
busy spell.  DIR holds the stand-in's report."
  (let* ((count (fastrevert-bench-lsp--size :flood-messages))
         (report (expand-file-name (format "flood-%s" (if carried "carried" "stock")) dir))
         (seen 0)
         (name (format "fastrevert-flood-%s" (if carried "carried" "stock")))
         (connection
          (progn
            (fastrevert-lsp-mode (if carried 1 -1))
            (unwind-protect
                (make-instance
                 'jsonrpc-process-connection
                 :name name
                 :process (lambda ()
                            (make-process
                             :name name
                             :command (list "sh" fastrevert-bench-lsp--stand-in "flood"
                                            (number-to-string count) "65000" report)
                             :connection-type 'pipe :coding 'utf-8-emacs-unix :noquery t
                             :stderr (get-buffer-create (format "*%s stderr*" name))))
                 :notification-dispatcher (lambda (_connection _method _params)
                                            (setq seen (1+ seen))))
              (fastrevert-lsp-mode -1))))
         (start (float-time)))
    (jsonrpc-notify connection :go nil)
    (let ((busy-until (+ start (fastrevert-bench-lsp--size :busy-seconds))))
      (while (< (float-time) busy-until)))
    (while (< seen count) (accept-process-output nil 0.05))
    (let ((handled (- (float-time) start)))
      (while (not (file-exists-p report)) (accept-process-output nil 0.01))
      (prog1 (cons (/ (with-temp-buffer
                        (insert-file-contents report)
                        (string-to-number (buffer-string)))
                      1e9)
                   handled)
        (jsonrpc-shutdown connection)))))

;;;; The section

(defun fastrevert-bench-lsp--client-rows (name connect root rounds)
  "Return the rows of client NAME, connected by CONNECT, under ROOT.
Each request is made ROUNDS times by each side."
  (let ((stock (fastrevert-bench-lsp--connect connect (expand-file-name "stock" root) nil))
        (carried (fastrevert-bench-lsp--connect connect (expand-file-name "carried" root) t)))
    (unwind-protect
        (let (rows)
          (dolist (request '((:symbols . "documentSymbol, 20,000 functions")
                             (:complete . "completion after <bits/stdc++.h>")))
            (fastrevert-bench--progress "LSP: %s %s" name (cdr request))
            (let ((costs (fastrevert-bench-lsp--pairs stock carried (car request) rounds)))
              (push (fastrevert-bench-lsp--row (format "%s: %s" name (cdr request))
                                               (car costs) (cdr costs))
                    rows)))
          (fastrevert-bench--progress "LSP: %s hovers" name)
          (push (fastrevert-bench-lsp--hover-row
                 (format "%s: %d hovers in a row" name (fastrevert-bench-lsp--size :hovers))
                 stock carried (fastrevert-bench-lsp--size :hovers))
                rows)
          (nreverse rows))
      (ignore-errors (funcall (plist-get stock :close)))
      (ignore-errors (funcall (plist-get carried :close))))))

(defun fastrevert-bench-lsp-run (root)
  "Print the LSP table, working under ROOT."
  (fastrevert-bench--heading "Language servers: stock and fastrevert-lsp-mode")
  (cond
   ((not (executable-find "clangd"))
    (fastrevert-bench--out "clangd is not installed (make deps installs it); skipped.\n\n"))
   ((not (require 'fastrevert-lsp nil t))
    (fastrevert-bench--out "fastrevert-lsp is not loaded; skipped.\n\n"))
   (t
    (let* ((dir (expand-file-name "lsp" root))
           (functions (fastrevert-bench-lsp--size :functions))
           (rounds (fastrevert-bench-lsp--size :rounds))
           (eglot-events-buffer-size 0)
           (eglot-autoreconnect nil)
           (lsp-session-file (expand-file-name "lsp-session" dir))
           (lsp-auto-guess-root t)
           (lsp-enable-snippet nil)
           (lsp-keep-workspace-alive nil)
           (lsp-restart 'ignore)
           (lsp-log-io nil)
           (lsp-enable-file-watchers nil)
           (lsp-headerline-breadcrumb-enable nil)
           ;; A first request may wait for clangd to index the large
           ;; file, longer than lsp-mode's default of 10 s.
           (lsp-response-timeout 600)
           rows)
      (dolist (side '("stock" "carried"))
        (fastrevert-bench-lsp--write-project (expand-file-name side dir) functions))
      (if (fastrevert-bench-require-debian-package 'eglot)
          (setq rows (append rows (fastrevert-bench-lsp--client-rows
                                   "eglot" #'fastrevert-bench-lsp--eglot dir rounds)))
        (fastrevert-bench--out "eglot is not installed; its rows are left out.\n"))
      (if (and (fastrevert-bench-require-debian-package 'lsp-mode) (require 'lsp-clangd nil t))
          (setq rows (append rows (fastrevert-bench-lsp--client-rows
                                   "lsp-mode" #'fastrevert-bench-lsp--lsp-mode dir rounds)))
        (fastrevert-bench--out "lsp-mode is not installed; its rows are left out.\n"))
      (fastrevert-bench--progress "LSP: flood")
      (let ((stock (fastrevert-bench-lsp--flood dir nil))
            (carried (fastrevert-bench-lsp--flood dir t)))
        (fastrevert-bench--out
         "%s The clients are eglot %s and lsp-mode, with clangd (`--limit-results=0'); \
the events buffer is off.  Wall: from the request until the client handled the reply; \
main ms/MB: the main thread's processor time (its schedstat) per MB of reply; gap: the \
longest time between two runs of a 10 ms timer meanwhile.  Medians of %d rounds.  Hovers: \
the whole run, and its main-thread ms, medians of %d rounds.\n\n"
         (if (fastrevert-bench-quick-p) "QUICK sizes." "")
         (if (boundp 'eglot--version) (symbol-value 'eglot--version) "as installed")
         rounds (fastrevert-bench-lsp--size :hover-rounds))
        (fastrevert-bench--print-table
         '("request" "MB" "stock ms" "carried ms" "stock/carried" "stock main ms/MB"
           "carried main ms/MB" "stock gap ms" "carried gap ms")
         rows)
        (fastrevert-bench--out
         "\nA server writes %d notifications of 65 KB (%.0f MB) while Emacs is busy for \
%.1f s: its writes took %.2f s stock and %.2f s carried; the client had handled them all \
%.2f s and %.2f s after the busy spell began.\n\n"
         (fastrevert-bench-lsp--size :flood-messages)
         (/ (* 65000.0 (fastrevert-bench-lsp--size :flood-messages)) 1e6)
         (fastrevert-bench-lsp--size :busy-seconds)
         (car stock) (car carried) (cdr stock) (cdr carried)))))))

(add-hook 'fastrevert-bench-sections #'fastrevert-bench-lsp-run 40)

(provide 'fastrevert-bench-lsp)

;;; fastrevert-bench-lsp.el ends here
