#!/usr/bin/env bash
# A simulated BMC for the tests: OpenIPMI's ipmi_sim serving IPMI v2.0 over LAN
# (RMCP+) on 127.0.0.1:PORT to user `admin` (administrator privilege) with
# PASSWORD. Its chassis is a QEMU VM with no disk (it idles in its firmware),
# connected back to the BMC on 127.0.0.1:VM_PORT: `chassis power on|off|cycle`
# start and stop that VM, as a real BMC powers its machine. The VM is powered on
# at start. Runs in the foreground until killed; DIR (made if absent) holds the
# configuration, the BMC's state and the VM's pid file (kill the VM by
# `pkill -f DIR`). Its one sensor, CPU Temp, reads DIR/cpu_temp.
#
#   ci/bmc-sim.sh DIR PORT VM_PORT PASSWORD
#
# ipmitool reaches it with `ipmitool -I lanplus -C 3 -H 127.0.0.1 -p PORT -U admin
# -P PASSWORD power status` (without `-C 3` each call waits 10 s for a cipher
# suite ipmi_sim does not offer).
set -euo pipefail
dir=$1 port=$2 vm_port=$3 password=$4
command -v ipmi_sim >/dev/null || { echo "bmc-sim: ipmi_sim missing (apt install openipmi)" >&2; exit 1; }
command -v qemu-system-x86_64 >/dev/null || { echo "bmc-sim: qemu-system-x86_64 missing" >&2; exit 1; }
mkdir -p "$dir/state"
dir=$(cd "$dir" && pwd)
cat >"$dir/lan.conf" <<CONF
name "cairn-bmc-sim"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 $port
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  serial 15 127.0.0.1 $vm_port codec VM
  startcmd "qemu-system-x86_64 -nographic -nodefaults -machine pc -m 32 -serial null -monitor none -pidfile $dir/vm.pid -chardev socket,id=ipmi0,host=127.0.0.1,port=$vm_port,reconnect=10 -device ipmi-bmc-extern,chardev=ipmi0,id=bmc1 -device isa-ipmi-kcs,bmc=bmc1"
  startnow true
  poweroff_wait 2
  kill_wait 2
  user 2 true "admin" "$password" admin 10 none md2 md5 straight
CONF
# `mc_setbmc` is mandatory: without it ipmi_sim exits at once, silently.
# One threshold sensor, "CPU Temp" (°C, upper non-critical 75, upper critical
# 85): a full sensor record in the SDR repository, its reading polled every
# second from DIR/cpu_temp (write a number there to heat or cool the machine).
[ -e "$dir/cpu_temp" ] || echo 40 >"$dir/cpu_temp"
cat >"$dir/sim.emu" <<EMU
mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 1000 0x0a
main_sdr_add 0x20 0x00 0x00 0x51 0x01 0x33 0x20 0x00 0x01 0x03 0x01 0x7f 0x48 0x01 0x01 0x00 0x70 0x00 0x70 0x18 0x18 0x00 0x01 0x00 0x00 0x01 0x00 0x00 0x00 0x00 0x00 0x00 0x00 0x00 0x00 0xff 0x00 0x00 0x55 0x4b 0x00 0x00 0x00 0x00 0x00 0x00 0x00 0x00 0xc8 0x43 0x50 0x55 0x20 0x54 0x65 0x6d 0x70
sensor_add 0x20 0 1 0x01 0x01 poll 1000 file "$dir/cpu_temp"
sensor_set_threshold 0x20 0 1 settable 011000 0 0x55 0x4b 0 0 0
mc_enable 0x20
EMU
exec ipmi_sim -c "$dir/lan.conf" -f "$dir/sim.emu" -n -s "$dir/state"
