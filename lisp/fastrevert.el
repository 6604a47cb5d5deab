;;; fastrevert.el --- Fast, native auto-revert and process output -*- lexical-binding: t; -*-

;; Version: 0.1.0
;; Package-Requires: ((emacs "28.1"))
;; Keywords: files, processes, convenience

;; This file is not part of GNU Emacs.

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; fastrevert moves the work of auto-revert and of reading subprocess
;; output off Emacs's main thread, into a native engine thread that a
;; dynamic module (written in C++) runs.
;;
;; The engine never calls Emacs.  It reports through a pipe process:
;; when results are waiting it writes one byte, and that process's
;; filter takes every waiting result in one module call.
;;
;; Usage, from an init file:
;;
;;   (add-to-list 'load-path "/path/to/fastrevert/lisp")
;;   (require 'fastrevert)
;;
;; When the native module is missing, `require' offers to build it
;; with CMake (see `fastrevert-module-compile').

;;; Code:

(defconst fastrevert-version "0.1.0"
  "The version of the fastrevert Lisp package.
The native module must have been built as the same version.")

(defgroup fastrevert nil
  "Native auto-revert and process output."
  :group 'files
  :prefix "fastrevert-")

(defcustom fastrevert-always-compile-module nil
  "Non-nil means build a missing native module without asking."
  :type 'boolean)

;;;; Errors

(define-error 'fastrevert-error "fastrevert error")
(define-error 'fastrevert-system-error "fastrevert system call failed" 'fastrevert-error)
(define-error 'fastrevert-not-running "fastrevert engine not running" 'fastrevert-error)
(define-error 'fastrevert-module-version-mismatch
  "fastrevert module does not match its Lisp" 'fastrevert-error)

;;;; Loading the native module

(declare-function fastrevert--mod-version "fastrevert-module" ())
(declare-function fastrevert--mod-start "fastrevert-module" (pipe-process))
(declare-function fastrevert--mod-stop "fastrevert-module" ())
(declare-function fastrevert--mod-running-p "fastrevert-module" ())
(declare-function fastrevert--mod-drain "fastrevert-module" (handler))
(declare-function fastrevert--mod-stats "fastrevert-module" ())
(declare-function fastrevert-module-compile "fastrevert-compile" ())

(defun fastrevert--check-module-version (module-version)
  "Signal an error unless MODULE-VERSION is `fastrevert-version'."
  (unless (equal module-version fastrevert-version)
    (signal 'fastrevert-module-version-mismatch
            (list (format "The fastrevert module was built as version %s, \
but the Lisp is version %s; rebuild it (make, or M-x \
fastrevert-module-compile) and restart Emacs"
                          module-version fastrevert-version)))))

(defun fastrevert--load-module ()
  "Load the native module, offering to build it when it is missing."
  (unless (featurep 'fastrevert-module)
    (unless module-file-suffix
      (user-error "Fastrevert needs an Emacs built with dynamic module support"))
    (unless (require 'fastrevert-module nil t)
      (if (or fastrevert-always-compile-module
              (and (not noninteractive)
                   (y-or-n-p "The fastrevert native module is not built; compile it now? ")))
          (progn
            (require 'fastrevert-compile)
            (fastrevert-module-compile))
        (error "The fastrevert native module (fastrevert-module%s) is not built: \
run `make' in the fastrevert source tree or M-x fastrevert-module-compile"
               module-file-suffix))))
  (fastrevert--check-module-version (fastrevert--mod-version)))

(when (< emacs-major-version 28)
  (error "Fastrevert needs Emacs 28 or later (it uses the module API's open_channel)"))
(fastrevert--load-module)

;;;; The engine

(defvar fastrevert--wake-process nil
  "The pipe process through which the engine wakes Emacs.")

(defvar fastrevert--record-handlers nil
  "Alist mapping an engine result kind (a symbol) to its handler.
A handler is called with the result's ID, CODE and DATA.")

(defvar fastrevert--main-thread-seconds 0.0
  "Seconds the main thread has spent handling engine results.")

(defvar fastrevert--lisp-counters nil
  "Plist of counters kept on the Lisp side, such as :reverts.")

(defun fastrevert--count (counter &optional amount)
  "Add AMOUNT (default 1) to the Lisp-side COUNTER."
  (setq fastrevert--lisp-counters
        (plist-put fastrevert--lisp-counters counter
                   (+ (or (plist-get fastrevert--lisp-counters counter) 0)
                      (or amount 1)))))

(defun fastrevert--dispatch (kind id code data)
  "Hand one engine result to the handler registered for KIND.
ID, CODE and DATA are the result's fields."
  (let ((handler (alist-get kind fastrevert--record-handlers)))
    (cond (handler (funcall handler id code data))
          ((eq kind 'notice) (message "fastrevert: %s" data)))))

(defun fastrevert--drain ()
  "Handle every result the engine has ready; return how many."
  (let ((start (float-time)))
    (unwind-protect
        (fastrevert--mod-drain #'fastrevert--dispatch)
      (setq fastrevert--main-thread-seconds
            (+ fastrevert--main-thread-seconds (- (float-time) start))))))

(defun fastrevert--wake-filter (_process _bytes)
  "Drain the engine when it writes its wake byte."
  (fastrevert--drain))

(defun fastrevert--engine-live-p ()
  "Return non-nil if the engine and its wake process are running."
  (and (fastrevert--mod-running-p)
       (process-live-p fastrevert--wake-process)))

(defun fastrevert--engine-ensure ()
  "Start the engine unless it is running already."
  (unless (fastrevert--engine-live-p)
    (fastrevert--engine-stop)
    (setq fastrevert--wake-process
          (make-pipe-process :name " *fastrevert-wake*"
                             :buffer nil
                             :coding 'binary
                             :noquery t
                             :filter #'fastrevert--wake-filter
                             :sentinel #'ignore))
    (fastrevert--mod-start fastrevert--wake-process)
    (add-hook 'kill-emacs-hook #'fastrevert--engine-stop)))

(defun fastrevert--engine-stop ()
  "Stop the engine thread and delete its wake process."
  (fastrevert--mod-stop)
  (when (processp fastrevert--wake-process)
    (delete-process fastrevert--wake-process))
  (setq fastrevert--wake-process nil))

;;;; Statistics

(defun fastrevert-stats ()
  "Return a plist of fastrevert's counters.
Engine counters are those of the running engine: `:watches' and
`:polled-files' (files watched and polled now), `:kernel-events',
`:events-dropped-natively' (events for files no buffer visits),
`:batches', `:overflows', `:processes' and `:bytes-read'.  Lisp
counters: `:reverts' and `:main-thread-ms', the time the main thread
spent handling engine results."
  (let ((stats (copy-sequence
                (or (fastrevert--mod-stats)
                    '(:watches 0 :polled-files 0 :kernel-events 0
                      :events-dropped-natively 0 :batches 0 :overflows 0
                      :processes 0 :bytes-read 0)))))
    (setq stats (plist-put stats :reverts
                           (or (plist-get fastrevert--lisp-counters :reverts) 0)))
    (plist-put stats :main-thread-ms
               (* 1000.0 fastrevert--main-thread-seconds))))

(provide 'fastrevert)

;;; fastrevert.el ends here
