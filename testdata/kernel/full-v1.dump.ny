subvol          ./s1                            uuid=35d6bd60-eea3-8043-937c-74702f12fdd9 transid=9
chown           ./s1/                           gid=0 uid=0
chmod           ./s1/                           mode=755
mkdir           ./s1/o257-9-0
rename          ./s1/o257-9-0                   dest=./s1/dir1
set_xattr       ./s1/dir1                       name=user.remove-me gone\ in\ s2 len=10
chown           ./s1/dir1                       gid=0 uid=0
chmod           ./s1/dir1                       mode=755
mkdir           ./s1/o258-9-0
rename          ./s1/o258-9-0                   dest=./s1/dir1/sub
set_xattr       ./s1/dir1/sub                   name=user.change-me before len=6
chown           ./s1/dir1/sub                   gid=8765 uid=4321
chmod           ./s1/dir1/sub                   mode=755
mkdir           ./s1/o259-9-0
rename          ./s1/o259-9-0                   dest=./s1/dir1/sub/deeper
chown           ./s1/dir1/sub/deeper            gid=0 uid=0
chmod           ./s1/dir1/sub/deeper            mode=700
mkdir           ./s1/o260-9-0
rename          ./s1/o260-9-0                   dest=./s1/dir2
set_xattr       ./s1/dir2                       name=system.posix_acl_default \002\000\000\000\001\000\a\000\377\377\377\377\002\000\a\000\350\003\000\000\004\000\005\000\377\377\377\377\020\000\a\000\377\377\377\377\ \000\005\000\377\377\377\377 len=44
chown           ./s1/dir2                       gid=0 uid=0
chmod           ./s1/dir2                       mode=755
mkdir           ./s1/o261-9-0
rename          ./s1/o261-9-0                   dest=./s1/emptydir
chown           ./s1/emptydir                   gid=0 uid=0
chmod           ./s1/emptydir                   mode=755
utimes          ./s1/emptydir                   atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkdir           ./s1/o262-9-0
rename          ./s1/o262-9-0                   dest=./s1/names
chown           ./s1/names                      gid=0 uid=0
chmod           ./s1/names                      mode=755
mkdir           ./s1/o263-9-0
rename          ./s1/o263-9-0                   dest=./s1/sticky-dir
chown           ./s1/sticky-dir                 gid=0 uid=0
chmod           ./s1/sticky-dir                 mode=1777
utimes          ./s1/sticky-dir                 atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkdir           ./s1/o264-9-0
rename          ./s1/o264-9-0                   dest=./s1/names/dir\ with\ space
chown           ./s1/names/dir\ with\ space     gid=0 uid=0
chmod           ./s1/names/dir\ with\ space     mode=755
mkfile          ./s1/o265-9-0
rename          ./s1/o265-9-0                   dest=./s1/small.txt
set_xattr       ./s1/small.txt                  name=user.empty  len=0
set_xattr       ./s1/small.txt                  name=user.weird line1\nline2\ttab\\back\377 len=21
set_xattr       ./s1/small.txt                  name=user.text hello\ world len=11
set_xattr       ./s1/small.txt                  name=user.bin \000\001\377\177\200 len=5
write           ./s1/small.txt                  offset=0 len=18
chown           ./s1/small.txt                  gid=0 uid=0
chmod           ./s1/small.txt                  mode=644
utimes          ./s1/small.txt                  atime=2021-07-04T08:00:00-0400 mtime=2021-07-04T08:00:00-0400 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o266-9-0
rename          ./s1/o266-9-0                   dest=./s1/one-byte
write           ./s1/one-byte                   offset=0 len=1
chown           ./s1/one-byte                   gid=0 uid=0
chmod           ./s1/one-byte                   mode=644
utimes          ./s1/one-byte                   atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o267-9-0
rename          ./s1/o267-9-0                   dest=./s1/empty
chown           ./s1/empty                      gid=0 uid=0
chmod           ./s1/empty                      mode=644
utimes          ./s1/empty                      atime=1969-12-31T19:00:00-0500 mtime=1969-12-31T19:00:00-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o268-9-0
rename          ./s1/o268-9-0                   dest=./s1/big.bin
write           ./s1/big.bin                    offset=0 len=49152
write           ./s1/big.bin                    offset=49152 len=49152
write           ./s1/big.bin                    offset=98304 len=49152
write           ./s1/big.bin                    offset=147456 len=49152
write           ./s1/big.bin                    offset=196608 len=8192
chown           ./s1/big.bin                    gid=0 uid=0
chmod           ./s1/big.bin                    mode=644
utimes          ./s1/big.bin                    atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o269-9-0
rename          ./s1/o269-9-0                   dest=./s1/clone-src.bin
write           ./s1/clone-src.bin              offset=0 len=16384
chown           ./s1/clone-src.bin              gid=0 uid=0
chmod           ./s1/clone-src.bin              mode=644
utimes          ./s1/clone-src.bin              atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o270-9-0
rename          ./s1/o270-9-0                   dest=./s1/sparse.bin
write           ./s1/sparse.bin                 offset=0 len=4096
truncate        ./s1/sparse.bin                 size=1048576
chown           ./s1/sparse.bin                 gid=0 uid=0
chmod           ./s1/sparse.bin                 mode=644
utimes          ./s1/sparse.bin                 atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o271-9-0
rename          ./s1/o271-9-0                   dest=./s1/holey.bin
write           ./s1/holey.bin                  offset=0 len=8192
write           ./s1/holey.bin                  offset=262144 len=4096
chown           ./s1/holey.bin                  gid=0 uid=0
chmod           ./s1/holey.bin                  mode=644
utimes          ./s1/holey.bin                  atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o272-9-0
rename          ./s1/o272-9-0                   dest=./s1/inline.txt
write           ./s1/inline.txt                 offset=0 len=1000
chown           ./s1/inline.txt                 gid=0 uid=0
chmod           ./s1/inline.txt                 mode=644
utimes          ./s1/inline.txt                 atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o273-9-0
rename          ./s1/o273-9-0                   dest=./s1/dir2/big-reflink.bin
clone           ./s1/dir2/big-reflink.bin       offset=0 len=204800 from=./s1/big.bin clone_offset=0
chown           ./s1/dir2/big-reflink.bin       gid=0 uid=0
chmod           ./s1/dir2/big-reflink.bin       mode=644
utimes          ./s1/dir2/big-reflink.bin       atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o274-9-0
rename          ./s1/o274-9-0                   dest=./s1/hl-a
link            ./s1/dir1/hl-b                  dest=hl-a
link            ./s1/dir1/sub/hl-c              dest=hl-a
write           ./s1/hl-a                       offset=0 len=3000
chown           ./s1/hl-a                       gid=0 uid=0
chmod           ./s1/hl-a                       mode=644
utimes          ./s1/hl-a                       atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o275-9-0
rename          ./s1/o275-9-0                   dest=./s1/dir1/sub/deeper/deep.txt
write           ./s1/dir1/sub/deeper/deep.txt   offset=0 len=22
chown           ./s1/dir1/sub/deeper/deep.txt   gid=0 uid=0
chmod           ./s1/dir1/sub/deeper/deep.txt   mode=644
utimes          ./s1/dir1/sub/deeper/deep.txt   atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o276-9-0
rename          ./s1/o276-9-0                   dest=./s1/append.txt
set_xattr       ./s1/append.txt                 name=user.big <\225\314\373]n\374\030\030C\355\270up\345\254Y\231\306\000\030\274_\026\356\356{c4m!.Eo\217\361\231\251\344\321X\354B\002\3651\270\341\363\200\315\235\367\v\316\275X\251(\257\036.\310U\2255C\000\272L\266\034\356f;\020A"\317&\276&Y\036\0259\322c\336{\002tL\347\262\225\333\207\362R\335e@\370\207$.\212\245\312\207\314\b\306o8\002BA\366\346\343[\264I*\202\211\260\004)\231\364Vo\344fH\ba\031\334\234\236\211`\3263\016\370\254\340}N\rC8t,T\263\245\217\177;\3724\331\220\205\371\326(\264H,(p\302V\032\254\246^\307\270\030e}xldf:\365%UD\3760[\372WT'\373+\nk"\036\320\241\213W\e6\244`\330d\217Hw\242\321\314\274\321\203\201?\304\224\327)\224/\343\355\355t\350\003\242\265K\017\306\341\225\230\330\334\336\205\301[\220\251NqMq\373I\253\256^-\306\227\275\261\342\252&\302\222\302\205\235\304[#\237a\242\027\371\223\021\217\3466;\ \327\262~G7\3702\3072\177\3010\204z\376J\234\271F\202\2057\253\240gz8\313Lf\333\362\253\303`J\3255\024\234\220z\243K~db\t*\000NK\032d\e\305s\362\316\351\224\350\254\376`$\v\302\\~%\244\270\236\312\345`'\331rwTL\252\244\265\371lMYkv\265P\031\225k&9\026\304\367\003\317\200\213\202\212\031u1;;g\320nK\375\247!\330~\330k\303"J\2418\260\224\300\242\343\027\367\267Z\351/\261\301\021\304OJ7\220\252-Z(\r~\345\276\260\277h\020\202\366n\v\036\252HZ\023\3017\255m\246\305e\264?\t\314\203ho\345]\016gsp6*\ j\206\ \006\354\237c\334\231\226/\222\021\031\005\227\300\314O\320\001\332\ \203\317\252\344\215\251\212.~\336\357\305\017\020\245)\3338\020\026eC\343\340\264\322\342\250vd\340\335\232}\272\257\355\345\017C\ \374\030@jA\340}Ua\354\224\230]5\351\356\203C\bK3i\222FJ\235}Z\373,\227Ki\273\303\311\346.\375T\006\252\277\tJ\206X\t\355\367@v\312e\242]\006\221f*]D\221!qc\232\303\3716\200{vp\024\367\247\234F\036\277\322.\3712\342.\276H\311\313\354ar\366:\2729\203\352\030XY\263\203s(\nP,y\026\347\2634/r\f^\310\245\336@\302W\226\251\200\022U\3202q\330{\330I\301\035}\261H\026Y=\315\217\326\220\325\017\336\272\200\333\265\224\323\253V@\2206\321-\327\201\270b\024\210\305u\350\3618\224X'\256\277\261&\211Y\277(\276\237\230\230\376QY\262\273\334\304\237{\304\261\362\246=\252\277\035\375\311uM\357\236\366\371D0c\036TF\026{\274\a\323m$\204/[\354-\347\336\034\343\220\022\227\376;\272n\325q\036\037\243\264p\361{\003:\352\205\343\300\266\222$Y)e'\261&2R\004xZnyJd"\v'\004\022\\\300F\ `X\332g#\271\255kC\e)\225\207\207\332\274i\244\353\215:\271&kx\324\257Q\362o\317\000E\307\271\270p\326\354\a\304\367(\365\037\240\006A\\\215\322\336H\206[\256)/\353\222\360T\355};\003\202\265M\336\002\t\000B\264\235'<}\231\212w\367\2225\346\332\3516\244\303;)3$3\201c\334\240\372j\004\240\230\016s\321\003\245%u\027\030\352\252#e\345~\257\034\ 0\345t9>h~\347l\220w\325y\354\330\022\344z.\351\214\256\314\3566z\221fk\234\274\212o\000\253\242"\213+/\2262\264\253\207\322\365\307\216\360=\336\335r(\005oL\210\274\243\214\025\031\355\275\004\3707\372\003\316\274\331@T\263b\000\222\225gC\237fT\364\3374\201\325\235\360\31219\257P2\271\324z\357X\247\240\027pO\332\223\026\272\034S\201[z>.q\350\a\272\256)\224\206\221X\343\207\370\022\344\224k\346TO\021\005a\255\nw\025r\265\207\234\214\210cd\b$\037\356\357\020\f\273\005\030\037\031\237\277n\001dP\036\025x\024\\\214\030EA\205\017\230\177\235\020'\275\354)\r\242U\005\345\332\233\n\233\363\v\324b\177\036\201&\2520'7wn\325\246Fn\265D\33612WT\247>\312*\364vg\320"G\362o\314\250\312|&\017y*\230-\025T%=\265\270\225x\003\263c\a\352\022\036k>a\372\267\205\363\315\360=\024\227\367\232\305\245O\334\004\260\017\026z\310\213\211\213\022d\366\003B\243\360\245#\345\322\241\374{.\017\a?u\271o\331\373\0364I\351w\372\177\310\373@\3049.W\343u\353D\232}z\001\352\334\311\025\211\326\003r_V\006\250\e\363\026\270X]\346\300I\\\027\355\277\202,\225\371=\361muS\247H%d|\207\342}\341\037d\346-\026\230d*\313\023\321\342Y\361:\006\373\344\t\240\247\316\242\346\360\300\027\351\263\336\270lo\034\352\021\342J\314\351\232\n{\232\362x\032AKgz\336"F\317\214Uj\003T5t%H\334\336{J\243T\216\022\203\276#F\326\fi\260\334u\376\031\362\366\030S>~s\203\273?\030\232\371\366\017z\303\021\242b\233pY\340^\306\330\222\272,\304'\026E\204\275:\361\313\177\027\f\256#\023\274\351][\371"\337=nY\316!\0373\211\177fE\2054y\345IC\257A\342\326L\342\a\204\353\331\004^\a\3326+\261\334\352\363l\035\253\247\240\346\034\n\212XA\261U\374<o\332\335>P\356EF\215-J\e\367\263\371\204V\200\260rwGi\221\377\335\225\2233=\032\322\274|Z\315E\370~\277*)\333\350*\027\226\230\367\250<$\331\222\267\230\332\027*C7\316\002{(\356B\373\214\262{\321\323g\377k\340F\374J\362\360\037\331\214\261@\313\204l\3650\026>8\212U#\341B\256\267\035\fV\003\367\255\216\025\026y'\362\341\240\271\216\203%\341\326\324\266\203\221|\036\361/\351\276\275\226]\341#\262\305\035\217\374\000\226\232\346\v\236\030\207\360\310\367:\016\206\242\324KG\245\aw-\a\342a\214\267\320U\022\026\226#\016\v\370,)j\314J\021\177\245=\347a{\231\3320\3321\341YSI\361$uGn#\234\352*\t\250\222\326zU\217\362\264v\252\330\003)#\261\323\022\ \372$\241\032\333'\275G\367\300wV\324\323\003Vp\356\343\030\332Bl\020n|\23442\265\263vo\226\216\202\226d\355\2331\203\324*\366`\3678'{\373\211\371\261<%\267n%\001\003,\215B\264*f\321\313\316\001[x<T]\016\364\260\232IM\273\326;F\371\312e\242;<\317\265\233\307\034'm\035\251i\355\337\377\031\322f\344\315\325pr\212\v\375"\213\275[\352\243\250B\232\354\211Y\221\265M\317,S\354\342X\002\316\334\353\206\255\006r\235\372\200\003\245\374\277\326\236\203N\f\330_L\200\n\206\032\351\004\203\v\a\201R1\\\242\227\227%\265\373g\003=\317\257\352@\354<\316\036=D\274l\241*(\221\317\277)(\205\232\262\327\336\235_,\201w;\377\272\002\206\346\212c\0243\350\303\330\256\017\341\267\223,\263\020\020\254H\341\205\204\245X\022!\364^IR\2641\362g;\242\246\026\177?\352\215L\277\304\265\353\233\224yQP\333\342,c\020O\330P\247\335\272\315\3731\367%;\237\360\200=L\354\313\365\330Z@'\322\225\036\254\220\266\017\363,\032\r\202\273\322\230\234;3\301\223\247\016U\274N\n\262\231\034\037\e\243h\237\336\375\273\016\353\221\272\037\345\303?\372\200&7\317\213>_\322\330N"\323a\320B\204\250\322\331]\200\2366\\u\003\002\021\222b\262q\211m\246\333\005\332v\vq\352eK\r\265\031\336m\262Fx\341\305\271.\030\r\270\302\317\\o\217\n\243\207E\ M\r\022\256/\313\323$*\034\375\266\362\304N\300\243\213=\312\262Ja\357\261qQh\226\355TlA\3301\326o\036}\b\275!YP\030\261\034\303E\255\321\326\225\005\213}\326\240\201\231\236\357\236\311$5\2549\362N\372^g\312\252h\241\022\343F3OYh\241-,\265\361\304^\211\250\327\303\201\366,B)\212F\200m7\303\226\211\025e}u\312\2773YUR\ \315S\241\235\000s\027E\322\330\243'\2468\217\023\2242[!\270\254\355\320\324>\353\220>\377l\002\333@\205\371|\365%a\037\273\ t:\300\216\263:\031\222\f\020\344\022\2467[\255aO\374S1\232[j\024\307_x\300\002\262\315T24>wWY]\354^\3108s\263\354\017n\350]\345\277\006\2302\024\262\037g\214\220\367\035(\235\032\376\242>\373\245~;;\016?3,6\274\321\207\275\356k\316N\344\3306\243\005s\216\242\371\361\222\253'\036\302!m\177\320\271\2426Y\311\267\341!=\365('\357.\341\257\020sfS\261?\377\003\\\263*`\205\236<\271\343U\377\303\232:\204\204\204\337]!\223\246\026\260s\271\336\031$\037v\244\222\301\201>\227\210\320\300\367\335R\372y\344\233$\375\303\225_\340R\344\346\002\221\351\261(r\324\203\035\037\3707Qr\310\267\231\262C\3116AV\363>\311\265_\227'\001\272\275iE}\222\204\222&!;5\372\001\b\271\032\354\223y\314\237^~@s\ g\331\346z\244\231H\257\253K\b\256\005\265\261OU\3322\252\224\322\024\001t\255\273;\037\2102\322\tF\205\314\240\264\3468h\324\210\376Oz\375\001\202\ d\231\211\367\241k\243\f\331fk\277!\366\005\023\203\004\370e\324C5\004L}5\230\237\003\210s\\)\351\242\000\266&E\376\250\210g\200\034\0256?\242\352\252\300\277\026E\t1\2531\000G\253W\032\220\201\004\177\355\265B\351\251\356\202_\020`D\211\225\272\241k\3469iRh\317\342\237\366[k\347\360\n.\233\334\344\374A\347\025P\217\232\376v\367\275\002\357'\322P,\206|\235oCPZ\005\370~\311S\365U\227\241\355\364\020\330_.0\222\345\201'V\256\017X\3343\356\250]\256\220\264w\240\272\375X$\247\026\024\341\2273X\356\200\314u}+~\256\277:\322\233j\376<\262\201\230\360\266I\347""sgbb\026\004!w\307\240\272\240dy\370\0345\355(\336S\037\233\024'\035o\362\356*(~]\277\325\372\232\020\211\3547\356\277\302\321\347\037\2255b`\347\253_\327S\362\253\301\321)\220\240\266\327\025k\251\000\003\254\f\356\006\265\036\017>N\344@\235\221\3172R\312\224\336\2503\005\266\333\327\\\005\374R\331\327l#K\341\3229\267\234MH\214\325\246\r)\246k=(\363s\366\236\265skg\200B\375\310\035\331\314\3209\021\027\377BN\232\345\232\354\251\243\020P\300\f\003\237\003,\235\376V}^1\016\243Z\366d\307\017\333z\337=\226\357l\327\275 len=3000
write           ./s1/append.txt                 offset=0 len=8000
chown           ./s1/append.txt                 gid=0 uid=0
chmod           ./s1/append.txt                 mode=644
utimes          ./s1/append.txt                 atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o277-9-0
rename          ./s1/o277-9-0                   dest=./s1/recreate.txt
write           ./s1/recreate.txt               offset=0 len=13
chown           ./s1/recreate.txt               gid=0 uid=0
chmod           ./s1/recreate.txt               mode=644
utimes          ./s1/recreate.txt               atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o278-9-0
rename          ./s1/o278-9-0                   dest=./s1/over-dst.txt
write           ./s1/over-dst.txt               offset=0 len=22
chown           ./s1/over-dst.txt               gid=0 uid=0
chmod           ./s1/over-dst.txt               mode=644
utimes          ./s1/over-dst.txt               atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o279-9-0
rename          ./s1/o279-9-0                   dest=./s1/perms-0600
write           ./s1/perms-0600                 offset=0 len=10
chown           ./s1/perms-0600                 gid=0 uid=0
chmod           ./s1/perms-0600                 mode=600
utimes          ./s1/perms-0600                 atime=2099-12-31T19:00:00-0500 mtime=2099-12-31T19:00:00-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o280-9-0
rename          ./s1/o280-9-0                   dest=./s1/perms-0444
write           ./s1/perms-0444                 offset=0 len=10
chown           ./s1/perms-0444                 gid=0 uid=0
chmod           ./s1/perms-0444                 mode=444
utimes          ./s1/perms-0444                 atime=1965-06-15T08:00:00-0400 mtime=1965-06-15T08:00:00-0400 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o281-9-0
rename          ./s1/o281-9-0                   dest=./s1/perms-0000
write           ./s1/perms-0000                 offset=0 len=9
chown           ./s1/perms-0000                 gid=0 uid=0
chmod           ./s1/perms-0000                 mode=0
utimes          ./s1/perms-0000                 atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o282-9-0
rename          ./s1/o282-9-0                   dest=./s1/perms-0755
write           ./s1/perms-0755                 offset=0 len=5
chown           ./s1/perms-0755                 gid=0 uid=0
chmod           ./s1/perms-0755                 mode=755
utimes          ./s1/perms-0755                 atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o283-9-0
rename          ./s1/o283-9-0                   dest=./s1/perms-0710
write           ./s1/perms-0710                 offset=0 len=8
chown           ./s1/perms-0710                 gid=0 uid=0
chmod           ./s1/perms-0710                 mode=710
utimes          ./s1/perms-0710                 atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
symlink         ./s1/o284-9-0                   dest=small.txt
rename          ./s1/o284-9-0                   dest=./s1/link-to-small
chown           ./s1/link-to-small              gid=5678 uid=1234
utimes          ./s1/link-to-small              atime=1965-06-15T08:00:00-0400 mtime=1965-06-15T08:00:00-0400 ctime=2026-12-01T00:49:30-0500
symlink         ./s1/o285-9-0                   dest=/nonexistent/absolute/target
rename          ./s1/o285-9-0                   dest=./s1/dangling-abs
chown           ./s1/dangling-abs               gid=0 uid=0
utimes          ./s1/dangling-abs               atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
symlink         ./s1/o286-9-0                   dest=names/new\nline
rename          ./s1/o286-9-0                   dest=./s1/link-odd-target
chown           ./s1/link-odd-target            gid=0 uid=0
utimes          ./s1/link-odd-target            atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
symlink         ./s1/o287-9-0                   dest=LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL
rename          ./s1/o287-9-0                   dest=./s1/link-long-target
chown           ./s1/link-long-target           gid=0 uid=0
utimes          ./s1/link-long-target           atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkdir           ./s1/o288-9-0
rename          ./s1/o288-9-0                   dest=./s1/dirlink-target
chown           ./s1/dirlink-target             gid=0 uid=0
chmod           ./s1/dirlink-target             mode=755
utimes          ./s1/dirlink-target             atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
symlink         ./s1/o289-9-0                   dest=dirlink-target
rename          ./s1/o289-9-0                   dest=./s1/dirlink
chown           ./s1/dirlink                    gid=0 uid=0
utimes          ./s1/dirlink                    atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mknod           ./s1/o290-9-0                   mode=20644 dev=0x103
rename          ./s1/o290-9-0                   dest=./s1/chr
chown           ./s1/chr                        gid=0 uid=0
chmod           ./s1/chr                        mode=644
utimes          ./s1/chr                        atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mknod           ./s1/o291-9-0                   mode=60644 dev=0x7c8
rename          ./s1/o291-9-0                   dest=./s1/blk
chown           ./s1/blk                        gid=0 uid=0
chmod           ./s1/blk                        mode=644
utimes          ./s1/blk                        atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mknod           ./s1/o292-9-0                   mode=20644 dev=0x10fa2c
rename          ./s1/o292-9-0                   dest=./s1/chr-bigminor
chown           ./s1/chr-bigminor               gid=0 uid=0
chmod           ./s1/chr-bigminor               mode=644
utimes          ./s1/chr-bigminor               atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mknod           ./s1/o293-9-0                   mode=60644 dev=0x11110370
rename          ./s1/o293-9-0                   dest=./s1/blk-bigmajor
chown           ./s1/blk-bigmajor               gid=0 uid=0
chmod           ./s1/blk-bigmajor               mode=644
utimes          ./s1/blk-bigmajor               atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfifo          ./s1/o294-9-0
rename          ./s1/o294-9-0                   dest=./s1/fifo
chown           ./s1/fifo                       gid=65534 uid=65534
chmod           ./s1/fifo                       mode=644
utimes          ./s1/fifo                       atime=2099-12-31T19:00:00-0500 mtime=2099-12-31T19:00:00-0500 ctime=2026-12-01T00:49:30-0500
mksock          ./s1/o295-9-0
rename          ./s1/o295-9-0                   dest=./s1/sock
chown           ./s1/sock                       gid=0 uid=0
chmod           ./s1/sock                       mode=755
utimes          ./s1/sock                       atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o296-9-0
rename          ./s1/o296-9-0                   dest=./s1/names/with\ space
write           ./s1/names/with\ space          offset=0 len=6
chown           ./s1/names/with\ space          gid=0 uid=0
chmod           ./s1/names/with\ space          mode=644
utimes          ./s1/names/with\ space          atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o297-9-0
rename          ./s1/o297-9-0                   dest=./s1/names/tab\there
write           ./s1/names/tab\there            offset=0 len=4
chown           ./s1/names/tab\there            gid=0 uid=0
chmod           ./s1/names/tab\there            mode=644
utimes          ./s1/names/tab\there            atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o298-9-0
rename          ./s1/o298-9-0                   dest=./s1/names/new\nline
set_xattr       ./s1/names/new\nline            name=user.on-odd-name odd len=3
write           ./s1/names/new\nline            offset=0 len=8
chown           ./s1/names/new\nline            gid=0 uid=0
chmod           ./s1/names/new\nline            mode=644
utimes          ./s1/names/new\nline            atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o299-9-0
rename          ./s1/o299-9-0                   dest=./s1/names/back\\slash
write           ./s1/names/back\\slash          offset=0 len=10
chown           ./s1/names/back\\slash          gid=0 uid=0
chmod           ./s1/names/back\\slash          mode=644
utimes          ./s1/names/back\\slash          atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o300-9-0
rename          ./s1/o300-9-0                   dest=./s1/names/bad\377\376
write           ./s1/names/bad\377\376          offset=0 len=9
chown           ./s1/names/bad\377\376          gid=0 uid=0
chmod           ./s1/names/bad\377\376          mode=644
utimes          ./s1/names/bad\377\376          atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o301-9-0
rename          ./s1/o301-9-0                   dest=./s1/names/caf\303\251
write           ./s1/names/caf\303\251          offset=0 len=5
chown           ./s1/names/caf\303\251          gid=0 uid=0
chmod           ./s1/names/caf\303\251          mode=644
utimes          ./s1/names/caf\303\251          atime=2021-07-04T08:00:00-0400 mtime=2021-07-04T08:00:00-0400 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o302-9-0
rename          ./s1/o302-9-0                   dest=./s1/names/ctl\001\177
write           ./s1/names/ctl\001\177          offset=0 len=4
chown           ./s1/names/ctl\001\177          gid=0 uid=0
chmod           ./s1/names/ctl\001\177          mode=644
utimes          ./s1/names/ctl\001\177          atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o303-9-0
rename          ./s1/o303-9-0                   dest=./s1/names/LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL
write           ./s1/names/LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL offset=0 len=5
chown           ./s1/names/LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL gid=0 uid=0
chmod           ./s1/names/LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL mode=644
utimes          ./s1/names/LLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLLL atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o304-9-0
rename          ./s1/o304-9-0                   dest=./s1/names/\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251x
write           ./s1/names/\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251x offset=0 len=7
chown           ./s1/names/\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251x gid=0 uid=0
chmod           ./s1/names/\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251x mode=644
utimes          ./s1/names/\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251\303\251x atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o305-9-0
rename          ./s1/o305-9-0                   dest=./s1/names/a=b,c
write           ./s1/names/a=b,c                offset=0 len=7
chown           ./s1/names/a=b,c                gid=0 uid=0
chmod           ./s1/names/a=b,c                mode=644
utimes          ./s1/names/a=b,c                atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o306-9-0
rename          ./s1/o306-9-0                   dest=./s1/names/q"uote's
write           ./s1/names/q"uote's             offset=0 len=6
chown           ./s1/names/q"uote's             gid=0 uid=0
chmod           ./s1/names/q"uote's             mode=644
utimes          ./s1/names/q"uote's             atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o307-9-0
rename          ./s1/o307-9-0                   dest=./s1/names/dir\ with\ space/inner\ file
write           ./s1/names/dir\ with\ space/inner\ file offset=0 len=6
chown           ./s1/names/dir\ with\ space/inner\ file gid=0 uid=0
chmod           ./s1/names/dir\ with\ space/inner\ file mode=644
utimes          ./s1/names/dir\ with\ space/inner\ file atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkdir           ./s1/o308-9-0
rename          ./s1/o308-9-0                   dest=./s1/names/dir\twith\ttabs
chown           ./s1/names/dir\twith\ttabs      gid=0 uid=0
chmod           ./s1/names/dir\twith\ttabs      mode=755
mkfile          ./s1/o309-9-0
rename          ./s1/o309-9-0                   dest=./s1/names/dir\twith\ttabs/f\377
write           ./s1/names/dir\twith\ttabs/f\377 offset=0 len=5
chown           ./s1/names/dir\twith\ttabs/f\377 gid=0 uid=0
chmod           ./s1/names/dir\twith\ttabs/f\377 mode=644
utimes          ./s1/names/dir\twith\ttabs/f\377 atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o310-9-0
rename          ./s1/o310-9-0                   dest=./s1/acl.txt
set_xattr       ./s1/acl.txt                    name=system.posix_acl_access \002\000\000\000\001\000\006\000\377\377\377\377\002\000\006\000\350\003\000\000\004\000\004\000\377\377\377\377\b\000\004\000\320\a\000\000\020\000\006\000\377\377\377\377\ \000\004\000\377\377\377\377 len=52
write           ./s1/acl.txt                    offset=0 len=4
chown           ./s1/acl.txt                    gid=0 uid=0
chmod           ./s1/acl.txt                    mode=664
utimes          ./s1/acl.txt                    atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o311-9-0
rename          ./s1/o311-9-0                   dest=./s1/dir2/inherited.txt
set_xattr       ./s1/dir2/inherited.txt         name=system.posix_acl_access \002\000\000\000\001\000\006\000\377\377\377\377\002\000\a\000\350\003\000\000\004\000\005\000\377\377\377\377\020\000\006\000\377\377\377\377\ \000\004\000\377\377\377\377 len=44
write           ./s1/dir2/inherited.txt         offset=0 len=21
chown           ./s1/dir2/inherited.txt         gid=0 uid=0
chmod           ./s1/dir2/inherited.txt         mode=664
utimes          ./s1/dir2/inherited.txt         atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o312-9-0
rename          ./s1/o312-9-0                   dest=./s1/owned.txt
write           ./s1/owned.txt                  offset=0 len=6
chown           ./s1/owned.txt                  gid=1000 uid=1000
chmod           ./s1/owned.txt                  mode=644
utimes          ./s1/owned.txt                  atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o313-9-0
rename          ./s1/o313-9-0                   dest=./s1/setuid-file
write           ./s1/setuid-file                offset=0 len=7
chown           ./s1/setuid-file                gid=100 uid=1000
chmod           ./s1/setuid-file                mode=4755
utimes          ./s1/setuid-file                atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o314-9-0
rename          ./s1/o314-9-0                   dest=./s1/setgid-file
write           ./s1/setgid-file                offset=0 len=7
chown           ./s1/setgid-file                gid=0 uid=0
chmod           ./s1/setgid-file                mode=2750
utimes          ./s1/setgid-file                atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
mkfile          ./s1/o315-9-0
rename          ./s1/o315-9-0                   dest=./s1/capfile
write           ./s1/capfile                    offset=0 len=4
chown           ./s1/capfile                    gid=1000 uid=1000
chmod           ./s1/capfile                    mode=750
set_xattr       ./s1/capfile                    name=security.capability \001\000\000\002\000\ \000\000\000\000\000\000\000\000\000\000\000\000\000\000 len=20
utimes          ./s1/capfile                    atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
utimes          ./s1/                           atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
utimes          ./s1/dir2                       atime=2021-07-04T08:00:00-0400 mtime=2021-07-04T08:00:00-0400 ctime=2026-12-01T00:49:30-0500
utimes          ./s1/names/dir\twith\ttabs      atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
utimes          ./s1/names                      atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
utimes          ./s1/names/dir\ with\ space     atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
utimes          ./s1/dir1/sub/deeper            atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
utimes          ./s1/dir1/sub                   atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
utimes          ./s1/dir1                       atime=2021-01-01T22:04:05-0500 mtime=2021-01-01T22:04:05-0500 ctime=2026-12-01T00:49:30-0500
