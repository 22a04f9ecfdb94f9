// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

import {ZooERC20} from "./ZooERC20.sol";

/// Every transfer pays `feeBps` (10% in the zoo) to the owner, except transfers from or to
/// accounts the owner excluded (the owner itself, so seeding the pool is untaxed). The owner can
/// change the fee, without a cap.
contract FeeOnTransferToken is ZooERC20 {
    uint256 public feeBps;
    mapping(address => bool) public isExcludedFromFee;

    constructor(string memory name_, string memory symbol_, uint256 supply, uint256 feeBps_) {
        _init(name_, symbol_, supply, msg.sender);
        feeBps = feeBps_;
        isExcludedFromFee[msg.sender] = true;
    }

    function setFee(uint256 feeBps_) external onlyOwner {
        feeBps = feeBps_;
    }

    function excludeFromFee(address account) external onlyOwner {
        isExcludedFromFee[account] = true;
    }

    function _transfer(address from, address to, uint256 value) internal override {
        if (isExcludedFromFee[from] || isExcludedFromFee[to] || feeBps == 0) {
            _move(from, to, value);
            return;
        }
        uint256 fee = (value * feeBps) / 10_000;
        _move(from, owner, fee);
        _move(from, to, value - fee);
    }
}
