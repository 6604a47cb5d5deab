;;; fastrevert-remote-helpers.el --- A remote host for the tests, on loopback -*- lexical-binding: t; -*-

;;; Commentary:

;; The remote tests reach a "remote" host through Tramp: an sshd of the
;; tests' own, listening on ports of 127.0.0.1, with a host key and a
;; user key made in a temporary directory, and stopped at the end.  ssh
;; reads its configuration from the account's home directory, not from
;; $HOME, so the tests give it their own with -F, through a Tramp method
;; of their own: `fastrevert-remote-test-method', a copy of "ssh" with
;; "-F CONFIG" in its login arguments.  The machine's own ssh
;; configuration is never read or changed.
;;
;; The configuration names three hosts, fr1 to fr3, one per port of the
;; sshd, so that Tramp makes three connections (each with a socket of
;; its own), and as many again, frd1 to frd3, reached through a relay
;; (fastrevert-remote-relay.el) that holds each chunk a while each way.
;;
;; The sshd can be started with a PATH of its sessions that lacks
;; inotifywait, or both inotifywait and fswatch: a directory of links to
;; every program but those.  The watcher then uses fswatch, or falls
;; back to its shell loop.

;;; Code:

(require 'fastrevert-test-helpers)
(require 'fastrevert)
(require 'tramp)
(require 'tramp-sh)
(require 'cl-lib)
(require 'subr-x)

(defconst fastrevert-remote-test-method "frssh"
  "The Tramp method of the tests: ssh with their own configuration.")

(defconst fastrevert-remote-test-hosts 3
  "How many hosts (ports of the one sshd) the configuration names.")

(cl-defstruct (fastrevert-remote-test-sshd (:constructor fastrevert-remote-test--sshd-create)
                                           (:copier nil))
  "An sshd of the tests' own."
  dir ports config process relay relay-ports relay-control user)

(defvar fastrevert-remote-test--sshd nil
  "The sshd the current test file runs, or nil.")

(defun fastrevert-remote-test--run (program &rest args)
  "Run PROGRAM with ARGS; fail with its output unless it succeeds."
  (with-temp-buffer
    (let ((code (apply #'call-process program nil t nil args)))
      (unless (eql code 0)
        (error "%s %s failed (%s): %s" program (string-join args " ") code (buffer-string))))))

(defun fastrevert-remote-test--free-port ()
  "Return a TCP port of 127.0.0.1 that nothing listens on now."
  (let* ((server (make-network-process :name "fastrevert-port-probe" :server t
                                       :host "127.0.0.1" :service t :noquery t))
         (port (process-contact server :service)))
    (delete-process server)
    port))

(defun fastrevert-remote-test--path-without (dir programs)
  "Make DIR a directory of links to every program but PROGRAMS.
Return DIR."
  (make-directory dir t)
  (dolist (bin '("/usr/local/bin" "/usr/bin" "/bin" "/usr/sbin" "/sbin"))
    (when (file-directory-p bin)
      (dolist (program (directory-files bin nil "\\`[^.]"))
        (let ((link (expand-file-name program dir)))
          (unless (or (member program programs)
                      (file-exists-p link) (file-symlink-p link))
            (make-symbolic-link (expand-file-name program bin) link))))))
  dir)

(defun fastrevert-remote-test--listening-p (port)
  "Return non-nil if something accepts TCP connections on PORT of 127.0.0.1."
  (condition-case nil
      (progn (delete-process (make-network-process :name "fastrevert-port-probe"
                                                   :host "127.0.0.1" :service port
                                                   :noquery t))
             t)
    (file-error nil)))

(defun fastrevert-remote-test--sshd-program ()
  "Return the sshd program's absolute file name (sshd refuses a relative one)."
  (or (cl-find-if #'file-executable-p '("/usr/sbin/sshd" "/usr/local/sbin/sshd" "/sbin/sshd"))
      (executable-find "sshd")
      (error "No sshd: `make deps' installs openssh-server")))

(defun fastrevert-remote-test--write (file text)
  "Write TEXT to FILE."
  (with-temp-file file (insert text)))

(defun fastrevert-remote-test--sshd-config (sshd)
  "Return the text of the sshd configuration of SSHD."
  (let ((dir (fastrevert-remote-test-sshd-dir sshd)))
    (concat
     (mapconcat (lambda (port) (format "Port %d\n" port))
                (fastrevert-remote-test-sshd-ports sshd) "")
     "ListenAddress 127.0.0.1\n"
     (format "HostKey %shostkey\n" dir)
     (format "AuthorizedKeysFile %sauthorized_keys\n" dir)
     (format "PidFile %ssshd.pid\n" dir)
     "StrictModes no\nUsePAM no\nPasswordAuthentication no\n"
     "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
     "MaxSessions 100\nMaxStartups 100\nLogLevel ERROR\n"
     (if (file-directory-p (expand-file-name "bin" dir))
         (format "SetEnv PATH=%sbin\n" dir)
       ""))))

(defun fastrevert-remote-test--ssh-config (sshd)
  "Return the text of the ssh client configuration for SSHD."
  (let ((dir (fastrevert-remote-test-sshd-dir sshd))
        (user (fastrevert-remote-test-sshd-user sshd)))
    (mapconcat
     (lambda (host)
       (format "Host %s\n  HostName 127.0.0.1\n  Port %d\n  User %s\n  IdentityFile %sid\n\
  IdentitiesOnly yes\n  UserKnownHostsFile /dev/null\n  GlobalKnownHostsFile /dev/null\n\
  StrictHostKeyChecking no\n  LogLevel ERROR\n"
               (car host) (cdr host) user dir))
     (append (cl-loop for port in (fastrevert-remote-test-sshd-ports sshd)
                      for i from 1 collect (cons (format "fr%d" i) port))
             (cl-loop for port in (fastrevert-remote-test-sshd-relay-ports sshd)
                      for i from 1 collect (cons (format "frd%d" i) port)))
     "")))

(defun fastrevert-remote-test--define-method (config)
  "Define `fastrevert-remote-test-method' as ssh reading CONFIG."
  (let ((ssh (cdr (assoc "ssh" tramp-methods))))
    (setq tramp-methods (cl-remove fastrevert-remote-test-method tramp-methods
                                   :key #'car :test #'equal))
    (push (cons fastrevert-remote-test-method
                (mapcar (lambda (parameter)
                          (if (eq (car parameter) 'tramp-login-args)
                              (list 'tramp-login-args
                                    (cons (list "-F" config) (cadr parameter)))
                            parameter))
                        ssh))
          tramp-methods)))

(defun fastrevert-remote-test-sshd-start (&rest options)
  "Start an sshd of the tests' own and return it.
OPTIONS: :without-notifiers non-nil gives its sessions a PATH without
inotifywait and fswatch; :without-inotifywait non-nil, one without
inotifywait alone (so with fswatch); :relay-delay MS starts the relay
to it, holding each chunk MS milliseconds each way."
  (unless (and (executable-find "ssh") (executable-find "ssh-keygen")
               (ignore-errors (fastrevert-remote-test--sshd-program)))
    (ert-skip "No ssh, ssh-keygen or sshd here (`make deps' installs them on Debian)"))
  (when (and (plist-get options :without-inotifywait) (not (executable-find "fswatch")))
    (ert-skip "No fswatch here (`make deps' installs it)"))
  (let* ((dir (file-name-as-directory (make-temp-file "fastrevert-sshd-" t)))
         (user (user-login-name))
         (sshd (fastrevert-remote-test--sshd-create
                :dir dir :user user
                :ports (cl-loop repeat fastrevert-remote-test-hosts
                                collect (fastrevert-remote-test--free-port)))))
    (cond ((plist-get options :without-notifiers)
           (fastrevert-remote-test--path-without (expand-file-name "bin" dir)
                                                 '("inotifywait" "fswatch")))
          ((plist-get options :without-inotifywait)
           (fastrevert-remote-test--path-without (expand-file-name "bin" dir)
                                                 '("inotifywait"))))
    (fastrevert-remote-test--run "ssh-keygen" "-q" "-t" "ed25519" "-N" "" "-f"
                                 (expand-file-name "hostkey" dir))
    (fastrevert-remote-test--run "ssh-keygen" "-q" "-t" "ed25519" "-N" "" "-f"
                                 (expand-file-name "id" dir))
    (copy-file (expand-file-name "id.pub" dir) (expand-file-name "authorized_keys" dir))
    (fastrevert-remote-test--write (expand-file-name "sshd_config" dir)
                                   (fastrevert-remote-test--sshd-config sshd))
    ;; sshd run as root needs its privilege separation directory, which
    ;; the system's own start of sshd would make.
    (when (and (zerop (user-uid)) (not (file-directory-p "/run/sshd")))
      (make-directory "/run/sshd" t)
      (set-file-modes "/run/sshd" #o755))
    (fastrevert-remote-test--sshd-launch sshd)
    (when (plist-get options :relay-delay)
      (fastrevert-remote-test--relay-start sshd (plist-get options :relay-delay)))
    (setf (fastrevert-remote-test-sshd-config sshd) (expand-file-name "ssh_config" dir))
    (fastrevert-remote-test--write (fastrevert-remote-test-sshd-config sshd)
                                   (fastrevert-remote-test--ssh-config sshd))
    (fastrevert-remote-test--define-method (fastrevert-remote-test-sshd-config sshd))
    (setq fastrevert-remote-test--sshd sshd)))

(defconst fastrevert-remote-test--guard
  "exec 3<&0; \"$@\" & p=$!; trap 'kill $p 2>/dev/null; exit' HUP INT TERM; \
{ read x <&3; kill $p 2>/dev/null; } & wait $p"
  "A shell command that runs its arguments until its input ends.
A daemon started through it ends with the Emacs that started it: when
that Emacs exits, it hangs up on its processes (which would make sshd
read its configuration again, not exit) or its end closes their input.")

(defun fastrevert-remote-test--guarded (name buffer command)
  "Start COMMAND as the process NAME with BUFFER, ended when this Emacs ends."
  (make-process :name name :buffer buffer :noquery t :connection-type 'pipe
                :command (append (list "sh" "-c" fastrevert-remote-test--guard "sh") command)))

(defun fastrevert-remote-test--sshd-launch (sshd)
  "Run SSHD's daemon and wait until it listens on each of its ports."
  (let ((dir (fastrevert-remote-test-sshd-dir sshd)))
    (setf (fastrevert-remote-test-sshd-process sshd)
          (fastrevert-remote-test--guarded
           "fastrevert-test-sshd" " *fastrevert-test-sshd*"
           (list (fastrevert-remote-test--sshd-program) "-D" "-e"
                 "-f" (expand-file-name "sshd_config" dir))))
    (unless (fastrevert-test-wait-for
             (lambda () (cl-every #'fastrevert-remote-test--listening-p
                                  (fastrevert-remote-test-sshd-ports sshd)))
             30)
      (error "The test sshd did not start: %s"
             (with-current-buffer " *fastrevert-test-sshd*" (buffer-string))))))

(defun fastrevert-remote-test--descendants (pid)
  "Return the process ids of PID's descendants, deepest last."
  (let ((children (make-hash-table))
        (found nil))
    (dolist (each (list-system-processes))
      (let ((ppid (alist-get 'ppid (process-attributes each))))
        (when ppid (push each (gethash ppid children)))))
    (let ((queue (list pid)))
      (while queue
        (let ((next (pop queue)))
          (dolist (child (gethash next children))
            (push child found)
            (setq queue (append queue (list child)))))))
    (nreverse found)))

(defun fastrevert-remote-test-sshd-kill (&optional sshd)
  "Kill SSHD's daemon and every session it serves, as a crash would.
The connections through it drop."
  (let* ((sshd (or sshd fastrevert-remote-test--sshd))
         (process (fastrevert-remote-test-sshd-process sshd))
         (pid (process-id process)))
    (dolist (each (cons pid (fastrevert-remote-test--descendants pid)))
      (ignore-errors (signal-process each 'KILL)))
    (fastrevert-test-wait-for (lambda () (not (process-live-p process))) 10)
    (fastrevert-test-wait-for
     (lambda () (not (cl-some #'fastrevert-remote-test--listening-p
                              (fastrevert-remote-test-sshd-ports sshd))))
     10)))

(defun fastrevert-remote-test-sshd-restart (&optional sshd)
  "Start SSHD's daemon again, on the same ports."
  (fastrevert-remote-test--sshd-launch (or sshd fastrevert-remote-test--sshd)))

(defun fastrevert-remote-test-sshd-stop (&optional sshd)
  "Stop SSHD, its relay and Tramp's connections, and delete its directory."
  (let ((sshd (or sshd fastrevert-remote-test--sshd)))
    (when sshd
      (ignore-errors (tramp-cleanup-all-connections))
      (let ((relay (fastrevert-remote-test-sshd-relay sshd)))
        (when (process-live-p relay)
          (dolist (pid (fastrevert-remote-test--descendants (process-id relay)))
            (ignore-errors (signal-process pid 'KILL)))
          (delete-process relay)))
      (fastrevert-remote-test-sshd-kill sshd)
      (delete-directory (fastrevert-remote-test-sshd-dir sshd) t)
      (setq fastrevert-remote-test--sshd nil))))

(defun fastrevert-remote-test-file (host local)
  "Return the Tramp name of LOCAL on HOST (\"fr1\", \"frd1\", ...)."
  (format "/%s:%s:%s" fastrevert-remote-test-method host local))

;;;; The relay

(defun fastrevert-remote-test--relay-start (sshd delay)
  "Start a relay holding each chunk DELAY ms each way to SSHD's ports."
  (let* ((dir (fastrevert-remote-test-sshd-dir sshd))
         (ports (cl-loop repeat fastrevert-remote-test-hosts
                         collect (fastrevert-remote-test--free-port)))
         (control (expand-file-name "relay-frozen" dir))
         (relay (fastrevert-remote-test--guarded
                 "fastrevert-test-relay" " *fastrevert-test-relay*"
                 (append
                           (list (expand-file-name invocation-name invocation-directory)
                                 "-Q" "--batch" "-l"
                                 (expand-file-name "test/lisp/fastrevert-remote-relay.el"
                                                   fastrevert-test-root)
                                 "-f" "fastrevert-remote-relay-main"
                                 (number-to-string delay) control)
                           (cl-mapcar (lambda (from to) (format "%d:%d" from to))
                                      ports (fastrevert-remote-test-sshd-ports sshd))))))
    (setf (fastrevert-remote-test-sshd-relay sshd) relay
          (fastrevert-remote-test-sshd-relay-ports sshd) ports
          (fastrevert-remote-test-sshd-relay-control sshd) control)
    (unless (fastrevert-test-wait-for
             (lambda () (cl-every #'fastrevert-remote-test--listening-p ports)) 30)
      (error "The relay did not start: %s"
             (with-current-buffer " *fastrevert-test-relay*" (buffer-string))))))

(defun fastrevert-remote-test-relay-freeze (frozen &optional sshd)
  "With FROZEN non-nil, have the relay of SSHD pass nothing on; else resume.
A host behind a frozen relay does not answer: what is sent to it
waits, in order, and flows again when the relay resumes."
  (let ((control (fastrevert-remote-test-sshd-relay-control
                  (or sshd fastrevert-remote-test--sshd))))
    (if frozen
        (fastrevert-remote-test--write control "")
      (delete-file control))))

;;;; Waiting and writing

(defun fastrevert-remote-test-write (file text &optional append)
  "Write TEXT to the local FILE as another program on the host would.
With APPEND non-nil, append it."
  (let ((coding-system-for-write 'utf-8-unix))
    (write-region text nil file append 'silent)))

(defun fastrevert-remote-test-text (buffer)
  "Return BUFFER's text without properties."
  (with-current-buffer buffer
    (buffer-substring-no-properties (point-min) (point-max))))

(defun fastrevert-remote-test-watchers ()
  "Return the live remote watcher processes, whether Tramp or ssh started them."
  (append (cl-remove-if-not (lambda (process)
                              (string-prefix-p "fastrevert-remote " (fastrevert-process-name process)))
                            (fastrevert-process-list))
          (cl-remove-if-not (lambda (process)
                              (and (process-live-p process)
                                   (string-prefix-p "fastrevert-remote " (process-name process))))
                            (process-list))))

(defun fastrevert-remote-test-running-p (host)
  "Return non-nil once the watcher of the connection to HOST has greeted."
  (let ((conn (gethash (format "/%s:%s:" fastrevert-remote-test-method host)
                       fastrevert-remote--conns)))
    (and conn (eq (fastrevert-remote--conn-state conn) 'running)
         (fastrevert-remote--conn-watching conn))))

;;;; The state of the watchers

(defun fastrevert-remote-test--conn (host)
  "Return the connection record of HOST, or nil."
  (gethash (format "/%s:%s:" fastrevert-remote-test-method host) fastrevert-remote--conns))

(defun fastrevert-remote-test-watching (host)
  "Return how the watcher of HOST watches, as it said, or nil."
  (let ((conn (fastrevert-remote-test--conn host)))
    (and conn (fastrevert-remote--conn-watching conn))))

(defun fastrevert-remote-test-item-size (buffer)
  "Return the size of BUFFER's file in the watcher's last line, a string, or nil."
  (with-current-buffer buffer
    (let ((item (cdr (fastrevert-remote--buffer-conn-item))))
      (and item (fastrevert-remote--item-state item)
           (cadr (split-string (fastrevert-remote--item-state item) " "))))))

(defun fastrevert-remote-test-checked-p ()
  "Return non-nil when no remote buffer waits to be checked or for a copy."
  (and (zerop (hash-table-count fastrevert-remote--pending))
       (not fastrevert-remote--check-timer)
       (cl-notany (lambda (buffer) (buffer-local-value 'fastrevert-remote--fetching buffer))
                  (buffer-list))))

(defun fastrevert-remote-test-wait-checked ()
  "Wait until every remote buffer due a check has had it."
  (should (fastrevert-test-wait-for #'fastrevert-remote-test-checked-p 10)))

(defun fastrevert-remote-test-wait-settled (buffers)
  "Wait until each of BUFFERS is watched and holds its file's last version."
  (should (fastrevert-test-wait-for
           (lambda ()
             (and (cl-every (lambda (buffer)
                              (with-current-buffer buffer
                                (let ((item (cdr (fastrevert-remote--buffer-conn-item))))
                                  (and item
                                       (equal fastrevert-remote--applied
                                              (fastrevert-remote--item-state item))))))
                            buffers)
                  (fastrevert-remote-test-checked-p)))
           30)))

(defun fastrevert-remote-test-cleanup ()
  "Kill the remote buffers, then turn the modes off; keep Tramp's connections."
  (dolist (buffer (buffer-list))
    (with-current-buffer buffer
      (when (and (or buffer-file-name (derived-mode-p 'dired-mode))
                 (file-remote-p default-directory))
        (set-buffer-modified-p nil)
        (kill-buffer buffer))))
  (fastrevert-mode -1)
  (global-auto-revert-mode -1))

;;;; Doing things on the host, and waiting

(defun fastrevert-remote-test-log-lines (file count interval)
  "Append COUNT lines to FILE, one every INTERVAL seconds, as a program would.
Return once the writer is done; Emacs runs meanwhile."
  (let ((writer (make-process
                 :name "fastrevert-test-log" :buffer nil :noquery t
                 :command (list "sh" "-c"
                                "i=0; while [ $i -lt $1 ]; do echo \"line $i\"; i=$((i+1)); \
sleep $2; done >>\"$3\""
                                "sh" (number-to-string count) (number-to-string interval) file))))
    (should (fastrevert-test-wait-for (lambda () (not (process-live-p writer)))
                                      (+ 30 (* 3 count interval))))))

(defun fastrevert-remote-test-idle (seconds)
  "Let Emacs run for SECONDS, doing nothing else."
  (let ((end (+ (float-time) seconds)))
    (while (< (float-time) end)
      (accept-process-output nil 0.05))))

(defun fastrevert-remote-test--allocations ()
  "Return how many conses, vectors and strings Emacs has made so far."
  (let ((counts (memory-use-counts)))
    (+ (nth 0 counts) (nth 2 counts) (nth 6 counts))))

(defun fastrevert-remote-test--wait (wait)
  "Call WAIT as `accept-process-output' for 50 ms; return what it cost.
The value is (LATE BUSY MADE): how late WAIT returned, the processor
time the main thread used in it less that of garbage collection, and
how many Lisp objects were made meanwhile, the measuring's own
included."
  (let ((start (float-time))
        (cpu (fastrevert-test-main-thread-seconds))
        (gc gc-elapsed)
        (made (fastrevert-remote-test--allocations)))
    (funcall wait nil 0.05)
    (setq made (- (fastrevert-remote-test--allocations) made))
    (list (- (float-time) start 0.05)
          (- (fastrevert-test-main-thread-seconds) cpu (- gc-elapsed gc))
          made)))

(defun fastrevert-remote-test-stalls (seconds)
  "Let Emacs run SECONDS in waits of 50 ms; return (LATE . BUSY) in seconds.
LATE is the longest any wait returned late.  BUSY is the most processor
time the main thread used in one wait in which Lisp ran, less that of
garbage collection: the work that kept it from input then.

Idle, the main thread reaches Lisp, and so the package, only through a
timer, a process's filter or sentinel, or an event; each of those makes
Lisp objects (a timer's call, a chunk of output).  A wait that made no
more objects than the measuring alone ran no Lisp, and is not busy,
whatever the clock says: on a virtual machine, time the host takes the
processor away while the thread runs is charged to the thread (17 to
24 ms, in a wait that ran nothing, in one of three idle 5 s runs here).

The engine's threads do not count, for they never keep input waiting.
A machine busy with other programs makes waits late, but not busy; a
main thread blocked on a host makes them late, which
`fastrevert-remote-test-round-trips' and the handlers' own times
\(`fastrevert-remote-test-main-thread-ms') show."
  (let ((end (+ (float-time) seconds))
        (measuring (progn (fastrevert-remote-test--wait #'ignore)
                          (nth 2 (fastrevert-remote-test--wait #'ignore))))
        (late 0.0)
        (busy 0.0))
    (while (< (float-time) end)
      (pcase-let ((`(,wait-late ,wait-busy ,made)
                   (fastrevert-remote-test--wait #'accept-process-output)))
        (setq late (max late wait-late))
        (when (> made measuring)
          (setq busy (max busy wait-busy)))))
    (cons late busy)))

(defun fastrevert-remote-test-count-tramp-calls (function)
  "Call FUNCTION; return how many calls reached Tramp's file name handler then."
  (let* ((count 0)
         (advice (lambda (&rest _) (setq count (1+ count)))))
    (advice-add 'tramp-file-name-handler :before advice)
    (unwind-protect (funcall function)
      (advice-remove 'tramp-file-name-handler advice))
    count))

;;;; The set-up of a test

(defvar fastrevert-remote-test--dir nil
  "The directory of the current test's files, local to the \"remote\" host.")

(defun fastrevert-remote-test--ensure (&rest options)
  "Start the test file's sshd once, and give each test an empty directory.
OPTIONS go to `fastrevert-remote-test-sshd-start'."
  (unless fastrevert-remote-test--sshd
    (apply #'fastrevert-remote-test-sshd-start options)
    (add-hook 'kill-emacs-hook #'fastrevert-remote-test-sshd-stop))
  (setq fastrevert-remote-test--dir
        (file-name-as-directory (make-temp-file "fastrevert-remote-" t))))

(defmacro fastrevert-remote-test--with-mode (&rest body)
  "Run BODY with `fastrevert-mode' and `global-auto-revert-mode' on, then clean up.
BODY may begin with keyword options: :interval SECONDS sets
`auto-revert-interval' (5 by default); the others go to
`fastrevert-remote-test-sshd-start' when the file's sshd starts."
  (declare (indent 0))
  (let ((interval 5)
        (sshd-options nil))
    (while (keywordp (car body))
      (let ((key (pop body))
            (value (pop body)))
        (if (eq key :interval)
            (setq interval value)
          (setq sshd-options (append sshd-options (list key value))))))
    `(progn
       (fastrevert-remote-test--ensure ,@sshd-options)
       (let ((auto-revert-remote-files t)
             (auto-revert-verbose nil)
             (auto-revert-use-notify t)
             (auto-revert-interval ,interval)
             (auto-revert-notify-exclude-dir-regexp "^$")
             (auto-revert-stop-on-user-input t))
         (unwind-protect
             (progn
               (fastrevert-mode 1)
               (global-auto-revert-mode 1)
               ,@body)
           (fastrevert-remote-test-cleanup)
           (delete-directory fastrevert-remote-test--dir t))))))

(defun fastrevert-remote-test--local (name)
  "Return the local name of NAME in this test's directory."
  (expand-file-name name fastrevert-remote-test--dir))

(defun fastrevert-remote-test--open (host name &optional text)
  "Write TEXT (if given) to NAME and visit it on HOST; return the buffer."
  (when text (fastrevert-remote-test-write (fastrevert-remote-test--local name) text))
  (find-file-noselect (fastrevert-remote-test-file host (fastrevert-remote-test--local name))))

;;;; Round trips and time on the main thread

(defvar fastrevert-remote-test--in-vc nil
  "Non-nil while fastrevert refreshes a remote buffer's VC state.")

(defun fastrevert-remote-test--mark-vc (function &rest args)
  "Call FUNCTION with ARGS, noting that a VC refresh runs."
  (let ((fastrevert-remote-test--in-vc t))
    (apply function args)))

(defun fastrevert-remote-test-round-trips (function)
  "Call FUNCTION; return (OWN . VC), the round trips Tramp made meanwhile.
A round trip is a command Tramp sends to its remote shell.  VC counts
those of the VC refreshes that follow reverts, which are stock's;
OWN counts all others."
  (let* ((own 0)
         (vc 0)
         (advice (lambda (&rest _)
                   (if fastrevert-remote-test--in-vc (setq vc (1+ vc)) (setq own (1+ own))))))
    (advice-add 'tramp-send-command :before advice)
    (advice-add 'fastrevert-remote--refresh-vc-now :around #'fastrevert-remote-test--mark-vc)
    (unwind-protect (funcall function)
      (advice-remove 'tramp-send-command advice)
      (advice-remove 'fastrevert-remote--refresh-vc-now #'fastrevert-remote-test--mark-vc))
    (cons own vc)))

(defun fastrevert-remote-test-main-thread-ms ()
  "Return the milliseconds the main thread spent on remote watchers so far."
  (let ((stats (fastrevert-remote-stats)))
    (+ (plist-get stats :remote-line-ms) (plist-get stats :remote-check-ms))))

(defun fastrevert-remote-test-seed ()
  "Return the seed of this run: FASTREVERT_TEST_SEED, or a new one.
The random number generator is seeded with it."
  (let ((seed (or (getenv "FASTREVERT_TEST_SEED") (number-to-string (random 1000000)))))
    (random seed)
    seed))

(defvar fastrevert-remote-test--changed-at nil
  "When the buffer a latency is measured on last changed, or nil.")

(defun fastrevert-remote-test--note-change (&rest _)
  "Note the time of a change to the buffer a latency is measured on."
  (setq fastrevert-remote-test--changed-at (float-time)))

(defun fastrevert-remote-test-latencies (pairs count spacing)
  "Return the seconds each of COUNT writes took to reach its buffer.
PAIRS is a list of (BUFFER . LOCAL-FILE), written to in turn.  Between
two writes Emacs runs for SPACING seconds plus a random part of one
more, once the buffer has the text and no check or copy is pending.

A write has reached its buffer when the buffer's text last changed
before it was found to be the text written: Emacs shows the buffer
then.  The VC refresh that follows a revert runs from a timer, after
that redisplay, but a wait in batch Emacs may run it before it
returns; it is not counted."
  (let ((latencies nil))
    (dotimes (i count)
      (pcase-let* ((`(,buffer . ,file) (nth (% i (length pairs)) pairs))
                   (text (format "write %d at %s\n" i (float-time)))
                   (start (float-time)))
        (setq fastrevert-remote-test--changed-at nil)
        (with-current-buffer buffer
          (add-hook 'after-change-functions #'fastrevert-remote-test--note-change nil t))
        (unwind-protect
            (progn
              (fastrevert-remote-test-write file text)
              (should (fastrevert-test-wait-for
                       (lambda () (equal (fastrevert-remote-test-text buffer) text)) 20)))
          (with-current-buffer buffer
            (remove-hook 'after-change-functions #'fastrevert-remote-test--note-change t)))
        (should fastrevert-remote-test--changed-at)
        (push (- fastrevert-remote-test--changed-at start) latencies)
        (fastrevert-remote-test-wait-checked)
        (fastrevert-remote-test-idle (+ spacing (/ (random 1000) 1000.0)))))
    (nreverse latencies)))

(defun fastrevert-remote-test-p90 (values)
  "Return the 90th percentile of VALUES (the nearest rank)."
  (let ((sorted (sort (copy-sequence values) #'<)))
    (nth (1- (ceiling (* 0.9 (length sorted)))) sorted)))

(provide 'fastrevert-remote-helpers)

;;; fastrevert-remote-helpers.el ends here
