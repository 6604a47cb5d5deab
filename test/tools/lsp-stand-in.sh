#!/bin/sh
# A language server stand-in for the LSP tests: it speaks just enough of
# the protocol's framing to test how its output reaches a client.
#
#   lsp-stand-in.sh reply BYTES    answers every request with a result
#                                  string of BYTES letters "a"
#   lsp-stand-in.sh end exit CODE  says one notification, then exits CODE
#   lsp-stand-in.sh end signal SIG says one notification, then dies of SIG
#   lsp-stand-in.sh wait           reads its input until end of file
#   lsp-stand-in.sh count N         once its first message came, writes N
#                                  notifications numbered 1 to N, then
#                                  reads its input until end of file
#   lsp-stand-in.sh flood N SIZE FILE
#                                  once its first message came, writes N
#                                  notifications of SIZE letters, then
#                                  the nanoseconds that took into FILE
set -eu

# Writes one message whose body is $1.
say() {
  printf 'Content-Length: %d\r\n\r\n%s' "${#1}" "$1"
}

case "$1" in
  reply)
    size=$2
    length=
    while IFS= read -r line; do
      line=$(printf '%s' "$line" | tr -d '\r')
      case "$line" in
        Content-Length:*) length=${line#Content-Length: } ;;
        '')
          body=$(dd bs=1 count="$length" 2>/dev/null)
          id=$(printf '%s' "$body" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
          prefix='{"jsonrpc":"2.0","id":'"$id"',"result":"'
          printf 'Content-Length: %d\r\n\r\n%s' $((${#prefix} + size + 2)) "$prefix"
          head -c "$size" /dev/zero | tr '\0' a
          printf '"}'
          ;;
      esac
    done
    ;;
  end)
    say '{"jsonrpc":"2.0","method":"stand-in/ending","params":{"how":"'"$2"'"}}'
    case "$2" in
      exit) exit "$3" ;;
      signal) kill -s "$3" $$ ;;
    esac
    ;;
  wait)
    cat >/dev/null
    ;;
  count)
    IFS= read -r _
    i=1
    while [ "$i" -le "$2" ]; do
      say '{"jsonrpc":"2.0","method":"stand-in/count","params":{"n":'"$i"'}}'
      i=$((i + 1))
    done
    cat >/dev/null
    ;;
  flood)
    IFS= read -r _
    body='{"jsonrpc":"2.0","method":"stand-in/flood","params":"'$(head -c "$3" /dev/zero | tr '\0' a)'"}'
    start=$(date +%s%N)
    i=0
    while [ "$i" -lt "$2" ]; do
      say "$body"
      i=$((i + 1))
    done
    end=$(date +%s%N)
    echo $((end - start)) >"$4"
    cat >/dev/null
    ;;
esac
