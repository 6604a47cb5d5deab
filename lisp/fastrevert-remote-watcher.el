;;; fastrevert-remote-watcher.el --- The watcher of a remote connection's files -*- lexical-binding: t; -*-

;; This file is part of fastrevert.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;;; Commentary:

;; A remote watcher is a POSIX shell program (`fastrevert-remote--script')
;; run on the remote host, one per Tramp connection.  It watches the
;; directories of the files it is told of with inotifywait, or fswatch,
;; or else stats the files every `auto-revert-interval', and prints one
;; line per change.  This library holds that program and how it is
;; started: by running ssh over the connection Tramp shares, where Tramp
;; shares one, so that starting it costs no round trip on the main
;; thread; otherwise as a remote process that Tramp starts.
;; fastrevert-remote.el decides what it watches and what its lines mean.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'format-spec)
(require 'fastrevert-process)

;; Tramp is loaded by then: a buffer is remote only once it has been.
(declare-function tramp-dissect-file-name "tramp" (name &optional nodefault))
(declare-function tramp-file-name-host "tramp" (vec))
(declare-function tramp-file-name-user "tramp" (vec))
(declare-function tramp-file-name-port "tramp" (vec))
(declare-function tramp-get-method-parameter "tramp" (vec param &optional default))
(declare-function tramp-compute-multi-hops "tramp" (vec))
(declare-function tramp-expand-args "tramp" (vec parameter &rest spec-list))
(declare-function tramp-ssh-controlmaster-options "tramp-sh" (vec))
(defvar tramp-compat-temporary-file-directory)

(defcustom fastrevert-remote-direct t
  "Non-nil means start a remote watcher over Tramp's shared ssh connection.
For ssh-based Tramp methods with connection sharing (see
`tramp-use-ssh-controlmaster-options'), the watcher is then started by
running ssh over the shared connection, without a round trip on the
main thread.  With nil, and for other methods, Tramp starts it as a
remote process, which costs several round trips once per connection."
  :type 'boolean
  :group 'fastrevert)

(defconst fastrevert-remote--heartbeat 60
  "Seconds between two heartbeats of an idle watcher.")

;;;; The watcher's program

(defconst fastrevert-remote--script
  "exec 2>/dev/null
set -f
exec 3<&0
L='
'
S=$(mktemp -d \"${TMPDIR:-/tmp}/fastrevert.XXXXXX\") || { S=${TMPDIR:-/tmp}/fastrevert.$$; mkdir -m 700 \"$S\"; } || exit 1
if [ \"$T\" = notify ] && command -v inotifywait >/dev/null; then T=inotifywait
elif [ \"$T\" = notify ] && command -v fswatch >/dev/null; then T=fswatch
else T=poll; fi
if stat -c %Y / >/dev/null; then
  case $(stat -c %.9Y /) in *.*) F='M %.9Y %s %n';; *) F='M %Y %s %n';; esac
  st() { stat -c \"$F\" -- \"$@\"; }
elif stat -f %m / >/dev/null; then
  case $(stat -f %Fm /) in *.*) F='M %Fm %z %N';; *) F='M %m %z %N';; esac
  st() { stat -f \"$F\" -- \"$@\"; }
else echo 'X no stat'; exit 1; fi
if command -v base64 >/dev/null; then E=base64
elif command -v openssl >/dev/null; then E='openssl base64'
else E=; fi
W=$L
O=
one() { st \"$1\" || printf 'M - - %s\\n' \"$1\"; }
ev() {
  p=${1%/}; [ -n \"$p\" ] || p=/
  case $W in *\"$L$p$L\"*) one \"$p\";; esac
  d=${p%/*}; [ -n \"$d\" ] || d=/
  case $W in *\"$L$d$L\"*) one \"$d\";; esac
}
all() { IFS=$L; for i in $W; do one \"$i\"; done; IFS=' '; }
tick() {
  IFS=$L
  n=$(st $W)
  IFS=' '
  [ \"$n\" = \"$O\" ] && return
  if [ \"$(printf '%s\\n' \"$n\" | grep -c '^M')\" -ne \"$(printf '%s' \"$W\" | grep -c .)\" ]; then
    n=$(all)
  fi
  IFS=$L
  for l in $n; do case $L$O$L in *\"$L$l$L\"*) ;; *) printf '%s\\n' \"$l\";; esac; done
  IFS=' '
  O=$n
}
dirs() {
  IFS=$L
  for i in $W; do
    if [ -d \"$i\" ]; then printf '%s\\n' \"$i\"; else d=${i%/*}; [ -d \"${d:-/}\" ] && printf '%s\\n' \"${d:-/}\"; fi
  done | sort -u >\"$S/d\"
  IFS=' '
  cmp -s \"$S/d\" \"$S/dirs\" && return
  mv \"$S/d\" \"$S/dirs\"
  : >\"$S/again\"
  [ -s \"$S/pid\" ] && kill \"$(cat \"$S/pid\")\"
}
feed() {
  (while IFS= read -r l; do printf 'C%s\\n' \"$l\"; done; echo Q) <&3 &
  (while [ -d \"$S\" ]; do sleep $B; echo B; done) &
  case $T in
    poll) while [ -d \"$S\" ]; do sleep $I; echo T; done;;
    *) while [ -d \"$S\" ]; do
        rm -f \"$S/again\"
        if [ -s \"$S/dirs\" ]; then
          if [ $T = inotifywait ]; then
            sh -c 'echo $$ >\"$1/pid\"; exec inotifywait -m -e modify,attrib,close_write,moved_to,moved_from,create,delete,delete_self,move_self --format E%w%f --fromfile \"$1/dirs\" 2>&1' sh \"$S\"
          else
            mkdir -p \"$S/w\"; rm -f \"$S/ready\"
            (n=0; while [ ! -e \"$S/ready\" ] && [ $n -lt 50 ]; do : >\"$S/w/p\"; sleep 0.2; n=$((n+1)); done; [ -e \"$S/ready\" ] || echo established) &
            sh -c 'echo $$ >\"$1/pid\"; set -f; IFS=$2; exec fswatch -l 0.2 --format E%p \"$1/w\" $(cat \"$1/dirs\")' sh \"$S\" \"$L\"
          fi | while IFS= read -r l; do case $l in E*/\"${S##*/}\"/w/p) [ -e \"$S/ready\" ] || { : >\"$S/ready\"; echo R; };; E*) printf '%s\\n' \"$l\";; *stablished*) echo R;; esac; done
          rm -f \"$S/pid\"
          [ -e \"$S/again\" ] || sleep 2
        else
          sleep 0.2 || sleep 1
        fi
      done;;
  esac
}
feed | {
  trap 'trap \"\" TERM; rm -rf \"$S\"; kill 0' EXIT
  trap 'exit 1' HUP PIPE INT TERM
  echo \"H 1 $T ${E:+copies}\"
  while IFS= read -r l; do
    case $l in
      C+*) i=${l#C+}; case $W in *\"$L$i$L\"*) ;; *) W=$W$i$L;; esac; [ $T = poll ] || one \"$i\";;
      C-*) i=${l#C-}; w=$L; IFS=$L; for j in $W; do [ \"$j\" = \"$i\" ] || w=$w$j$L; done; IFS=' '; W=$w;;
      C.) if [ $T = poll ]; then tick; else dirs; fi;;
      C\\<*) r=${l#C?}; n=${r%% *}; r=${r#* }; o=${r%% *}; f=${r#* }
        echo \"D $n\"
        if [ -n \"$E\" ] && [ -r \"$f\" ] && [ ! -d \"$f\" ]; then tail -c +\"$o\" -- \"$f\" | $E; echo \"E $n 0\"; else echo \"E $n 1\"; fi;;
      E) all;;
      E*) ev \"${l#E}\";;
      T) tick;;
      R) all;;
      B) echo B;;
      Q|Cq) break;;
    esac
  done
}
"
  "The watcher: a POSIX shell program run on the remote host.
It reads lines on its standard input: \"+NAME\" and \"-NAME\" add and
remove a file (or a directory, for Dired) to watch, \".\" applies the
changes to the set of directories watched, \"<ID OFFSET NAME\" asks
for a copy of the file NAME from byte OFFSET (the first is 1) on,
and \"q\" or the end of input ends it.  It prints \"H PROTOCOL MODE
COPIES\" once (COPIES is \"copies\" when it can send copies), then
\"M MTIME SIZE NAME\" for a watched file as it is added (with `poll',
at the \".\" that follows) and whenever it may have changed
\(\"M - - NAME\" for one that does not exist), and
\"B\" as a heartbeat.  A copy comes as \"D ID\", the bytes in base64
lines, and \"E ID STATUS\", STATUS 0 if the file could be read.

The shell variables T (`notify' or `poll'), I (the poll
interval) and B (the heartbeat interval) are set before it.

When it ends, however it ends (its input closed, or its output, as
when the connection drops, or a heartbeat finds it gone), it removes
its temporary directory and ends every process of its process group:
sshd, or Tramp's login for it, made that group its own.

MODE is `inotifywait' or `fswatch' when such a program watches the
directories, each event making the program stat the file named; with
`poll', every watched file is stat'ed every I seconds and only the
lines that changed are printed.  A change of the watched directories
restarts the notifying program, and once it watches them again every
file is stat'ed anew, so that no change made meanwhile is missed.
inotifywait says when its watches are in place; fswatch does not, so
the watcher has it watch a directory of its own too, and writes a file
there every 0.2 s until fswatch reports it (for 10 s at most).
fswatch reports within 0.2 s of an event rather than its default
second.")

(defconst fastrevert-remote--bootstrap
  "echo S; IFS= read -r n; eval \"$(dd bs=1 count=\"$n\" 2>/dev/null)\""
  "The shell command that starts the watcher, reading the program from its input.
It prints \"S\" once it runs; then the first line of its input gives
the program's length in bytes, and the program follows; what comes
after it is the watcher's own input.  Sending the program this way
keeps the command line short and free of quoting that the remote
login shell could read differently.  Nothing is sent before the
\"S\": the shell that Tramp runs a command in may read past the
command's line (its terminal is not in canonical mode), which would
lose what comes after.")

(defun fastrevert-remote-watcher-send-program (process mode interval)
  "Send the watcher PROCESS its program, for MODE and INTERVAL.
Call this once it has printed \"S\"; see `fastrevert-remote--program'."
  (let ((program (fastrevert-remote--program mode interval)))
    (fastrevert-remote-watcher-send process (format "%d\n%s" (string-bytes program) program))))

(defun fastrevert-remote--program (mode interval)
  "Return the watcher's program for MODE (`notify' or `poll') and INTERVAL."
  (concat (format "T=%s I=%s B=%d\n" mode
                  (if (= interval (round interval))
                      (number-to-string (max 1 (round interval)))
                    (format "%.3f" (max 0.1 interval)))
                  fastrevert-remote--heartbeat)
          fastrevert-remote--script))

;;;; Starting a watcher

(defun fastrevert-remote-watcher-connected-p (key)
  "Return non-nil if Tramp's connection KEY is up; this costs no round trip.
KEY is a connection's part of a file name, as `file-remote-p' returns it."
  (file-remote-p (concat key "/") nil 'connected))

(declare-function tramp-get-connection-property "tramp-cache" (key property &optional default))

(defun fastrevert-remote-tramp-busy-p ()
  "Return non-nil while Tramp waits on one of its connections.
A timer that runs then, inside Tramp's wait for output, must not call
Tramp: that is a reentrant call, which Tramp refuses."
  (cl-some (lambda (process)
             (and (or (process-get process 'vector) (process-get process 'tramp-vector))
                  (tramp-get-connection-property process "locked" nil)))
           (process-list)))

(defun fastrevert-remote--ssh-prefix (vec)
  "Return the ssh command line that reaches VEC's host over its shared socket.
A remote command, run by the login shell there, is to follow it.
That is the command line Tramp's own direct processes use: the login
program and arguments of VEC's method, with the connection-sharing
options Tramp gave its own connection, so that ssh reaches the host
through that connection's socket.  \"ControlMaster=no\" comes first
\(ssh takes the first value of an option), so that the watcher never
becomes the connection others share, and \"BatchMode=yes\" keeps ssh
from asking for a password where no shared connection exists.
Return nil when the method is not ssh with connection sharing (Tramp
shares none when `tramp-use-ssh-controlmaster-options' is nil), needs
a terminal, or goes through more than one hop."
  (let ((program (tramp-get-method-parameter vec 'tramp-login-program))
        (login-args (tramp-get-method-parameter vec 'tramp-login-args)))
    (when (and (stringp program)
               (string-match-p "\\(?:\\`\\|/\\)ssh\\'" program)
               (member '("%c") login-args)
               (not (cl-some (lambda (args)
                               (cl-some (lambda (arg)
                                          (or (equal arg "-t")
                                              (string-match-p "RemoteCommand" arg)))
                                        args))
                             login-args))
               (eql 1 (length (ignore-errors (tramp-compute-multi-hops vec)))))
      (let* ((options (format-spec (or (ignore-errors (tramp-ssh-controlmaster-options vec)) "")
                                   (format-spec-make ?t (make-temp-name "tramp."))))
             (spec (list ?h (or (tramp-file-name-host vec) "")
                         ?u (or (tramp-file-name-user vec) "")
                         ?p (or (tramp-file-name-port vec) "")
                         ?c options ?l "" ?n "" ?a "" ?d ""))
             ;; Tramp 2.6 gave this function a DEFAULT argument third.
             (expanded (ignore-errors
                         (if (>= (car (func-arity 'tramp-expand-args)) 3)
                             (apply #'tramp-expand-args vec 'tramp-login-args nil spec)
                           (apply #'tramp-expand-args vec 'tramp-login-args spec)))))
        ;; Without a shared socket ssh would make a login of its own:
        ;; fastrevert rides Tramp's connections, it makes none.
        (when (and expanded (string-match-p "ControlPath=" options)
                   (not (string-match-p "ControlPath=none" options)))
          (append (list program "-o" "ControlMaster=no" "-o" "BatchMode=yes")
                  (flatten-tree (tramp-get-method-parameter vec 'tramp-async-args))
                  (mapcan (lambda (arg) (split-string arg " " t)) expanded)))))))

(defun fastrevert-remote-watcher-start (key host filter sentinel)
  "Start a watcher on Tramp's connection KEY to HOST; return (PROCESS . SSH).
Once it prints \"S\", it is to be sent its program
\(`fastrevert-remote-watcher-send-program').  FILTER is called with the
process and its output, and
SENTINEL with the process and a word for its end.  SSH is the command
line that reaches the host over its shared connection, when the
watcher was started that way (see `fastrevert-remote-direct');
otherwise it is nil, and Tramp started the watcher."
  (let* ((ssh (and fastrevert-remote-direct
                   (fastrevert-remote--ssh-prefix (tramp-dissect-file-name key))))
         (name (format "fastrevert-remote %s" host))
         (process (if ssh
                      (fastrevert-remote--start-direct
                       name (append ssh (list (concat "exec sh -c '" fastrevert-remote--bootstrap
                                                      "'")))
                       filter sentinel)
                    (fastrevert-remote--start-through-tramp key name filter sentinel))))
    (cons process ssh)))

(defun fastrevert-remote--stderr-buffer (name)
  "Return the empty buffer for standard error of the watcher NAME."
  (let ((buffer (get-buffer-create (format " *%s stderr*" name))))
    (with-current-buffer buffer (erase-buffer))
    buffer))

(defun fastrevert-remote--start-direct (name command filter sentinel)
  "Run COMMAND, an ssh command line, as the watcher NAME; return the process.
Its output is read by fastrevert's engine, FILTER getting its lines
and SENTINEL its end.  It runs where Tramp's connection runs, for the
connection's socket may be named relative to that directory."
  (let ((default-directory (file-name-as-directory tramp-compat-temporary-file-directory)))
    (fastrevert-make-process
     :name name
     :command command
     :coding 'utf-8-unix
     :noquery t
     :stderr (fastrevert-remote--stderr-buffer name)
     :framing 'lines
     :filter filter
     :sentinel (lambda (process event) (funcall sentinel process (string-trim event))))))

(defun fastrevert-remote--start-through-tramp (key name filter sentinel)
  "Start the watcher NAME on connection KEY through Tramp; return the process.
FILTER gets its output and SENTINEL its end.  Tramp sets up a shell
for the process on the main thread, which takes several round trips;
the first buffer of a connection is watched while it is being
opened, which already waits on Tramp."
  (let* ((default-directory (concat key "/"))
         (process (make-process
                   :name name
                   :buffer nil
                   :command (list "sh" "-c" fastrevert-remote--bootstrap)
                   :coding 'utf-8-unix
                   :noquery t
                   :connection-type 'pipe
                   :file-handler t
                   :filter filter
                   :sentinel (lambda (process event)
                               (unless (process-live-p process)
                                 (funcall sentinel process (string-trim event)))))))
    (set-process-query-on-exit-flag process nil)
    process))

(defun fastrevert-remote-watcher-send (process string)
  "Send STRING to the watcher PROCESS, encoded as file names are.
A watcher that has just ended gets nothing: its sentinel tells."
  (let ((bytes (encode-coding-string string 'utf-8-unix)))
    (ignore-errors
      (if (fastrevert-process-p process)
          (fastrevert-process-send-string process bytes)
        (process-send-string process bytes)))))

(defun fastrevert-remote-watcher-stderr (process)
  "Return what the watcher PROCESS wrote on its standard error, trimmed."
  (let ((buffer (get-buffer (format " *%s stderr*" (if (fastrevert-process-p process)
                                                       (fastrevert-process-name process)
                                                     (process-name process))))))
    (if (buffer-live-p buffer)
        (with-current-buffer buffer (string-trim (buffer-string)))
      "")))

(defun fastrevert-remote-watcher-kill (process)
  "Kill the watcher PROCESS if it is still running, and its buffer of errors."
  (when process
    (let ((stderr (get-buffer (format " *%s stderr*" (if (fastrevert-process-p process)
                                                         (fastrevert-process-name process)
                                                       (process-name process))))))
      (cond ((fastrevert-process-p process)
             (when (fastrevert-process-live-p process)
               (fastrevert-delete-process process)))
            ((processp process)
             (delete-process process)))
      (when (buffer-live-p stderr) (kill-buffer stderr)))))

(provide 'fastrevert-remote-watcher)

;;; fastrevert-remote-watcher.el ends here
